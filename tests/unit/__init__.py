"""Tests of the package, laid out as operator/proctor is; here, the package as a whole."""
