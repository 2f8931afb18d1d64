EXTRA_DIST += docs/config.md docs/ff_infer.md docs/ff_weights.md docs/performance.md \
	docs/reliability.md
