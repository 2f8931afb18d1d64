EXTRA_DIST += docs/config.md
