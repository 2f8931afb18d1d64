# Documentation: the man pages of the file format and the overview, and the
# Markdown references, installed in $(docdir) (apexx.ini, apexx.ini(5) and
# apexx(7) point there). The tools' pages are in tools/ and bench/local.mk.
dist_man_MANS += docs/apexx.ini.5 docs/apexx.7
dist_doc_DATA = docs/config.md docs/ops.md docs/report.md docs/ff_infer.md \
	docs/ff_weights.md docs/python.md docs/reliability.md docs/performance.md \
	docs/graph.md docs/trt.md docs/architecture.md
