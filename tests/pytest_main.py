"""Runs pytest on the test files given as arguments: the `main` of every Bazel py_test (see BUILD).

Bazel runs a py_test's main file as `__main__`, while the tests here are pytest-style (plain `test_*`
functions, fixtures, tests/conftest.py), so each target runs this launcher with its test file in `args`.
It also maps Bazel's test protocol onto pytest: `--test_filter` becomes `-k`, and the JUnit XML goes where
Bazel reads it, so per-test results show up in test.xml.
"""
import os
import sys

import pytest


def _PytestArgs(argv, environ):
  """pytest's command line for the files in argv under the Bazel test environment in environ."""
  args = ['-p', 'no:cacheprovider', '-q', '--rootdir', os.getcwd()]
  if environ.get('XML_OUTPUT_FILE'):
    args += ['--junitxml', environ['XML_OUTPUT_FILE']]
  if environ.get('TESTBRIDGE_TEST_ONLY'):
    args += ['-k', environ['TESTBRIDGE_TEST_ONLY']]
  return args + list(argv)


def main(argv):
  if not argv:
    sys.stderr.write('usage: pytest_main.py TEST_FILE...\n')
    return 2
  # Python puts the resolved directory of this script (the source tree, since runfiles are symlinks) first on
  # sys.path; drop it so that helpers such as sharding_model_fixture come from the runfiles like all else.
  here = os.path.dirname(os.path.realpath(__file__))
  if sys.path and os.path.realpath(sys.path[0] or '.') == here:
    del sys.path[0]
  return pytest.main(_PytestArgs(argv, os.environ))


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
