#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make check: every fuzz target (built without libFuzzer) over its kept
# seed corpus and crash inputs (tests/fuzz/corpus/NAME, crashes/NAME).
set -e
src=${APEXX_SRCDIR:-$(dirname "$0")/../..}
build=${APEXX_BUILDDIR:-.}
for t in config ops ff_weights compare report; do
  "$build/tests/fuzz/replay_$t" "$src/tests/fuzz/corpus/$t" "$src/tests/fuzz/crashes/$t"
done
