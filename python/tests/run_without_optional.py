#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python suite as on a machine without its optional pieces: PyTorch,
CuPy, ONNX and TensorRT's Python modules are made unimportable for the run
(run_tests.py --without), so every test module must import and every test
that needs one must skip with its reason. On a machine without them it is
the same run as run_tests.py; where they are installed (CI installs
python3-torch) it checks the skips the README's quick start relies on."""
import sys

import run_tests

OPTIONAL = "torch,cupy,onnx,onnxruntime,tensorrt"

if __name__ == "__main__":
    sys.exit(run_tests.main(["--without", OPTIONAL] + sys.argv[1:]))
