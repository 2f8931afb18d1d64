# tests of this part: see tests/local.mk
