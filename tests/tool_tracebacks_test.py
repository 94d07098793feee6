"""Every tool, run as a user runs it, on bad input a user can type (issue #35): nonexistent paths, an empty
directory or a file where a directory is expected, a data or log directory whose manifest, state file or
checkpoints.jsonl is random bytes, unknown experiments, bad overrides and garbage flag values. Each must exit
non-zero with no traceback, its last line on stderr `tool: message`, and nothing created or changed in any
path it was given (nor in the directory it ran in).

This file is the scan for tracebacks:  python -m pytest -q -n 2 --dist loadfile tests/tool_tracebacks_test.py
It samples: a few inputs per tool and class (each a process that imports TensorFlow), run a few at a time.
A tool without cases below gets a file as each of its directory flags.
"""
import ast
import concurrent.futures
import glob
import os
import random
import shutil
import subprocess
import sys
import time

import pytest

from lingvo_gshard.data import build
import data_helpers
import input_helpers

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TOOLS = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(_REPO, 'tools', '*.py'))
                if not os.path.basename(p).startswith('_') and "__name__ == '__main__'" in open(p).read())

# Placeholders, each a fresh copy per case: {empty} an empty directory, {file} a regular file, {new} and
# {missing} paths that do not exist, {corpus} a built corpus, {garbage_manifest} / {shape_manifest} data
# directories whose manifest.json is random bytes / JSON of another shape, {garbage_state} a log directory
# whose checkpoint state file is random bytes, {bad_log} one whose checkpoints.jsonl has a row that is not
# a record, {tsv} a TSV file of random bytes, {mo_tree} a locale tree of random-bytes catalogs.
_TINY = '--model_params_override=task.encoder.num_layers : 1'
_CASES = {
    'average_checkpoints': [['--model=M4TinyMoE', '--logdir={garbage_state}', '--last=2', '--output_logdir={new}']],
    'compare_runs': [['--a=x', '--b=y={empty}'], ['--a=x={empty}', '--b=y={file}']],
    'decode_benchmark': [['--model=NoSuchModel', '--data_dir={garbage_manifest}']],
    'export': [['--model=M4TinyMoE', '--logdir={garbage_state}', '--export_dir={new}']],
    'expert_map': [['--model=M4TinyMoE', '--logdir={garbage_state}'],
                   ['--model=M4TinyMoE', '--logdir={empty}', '--output_dir={file}']],
    'evaluate': [
        ['--model=M4TinyMoE', '--logdir={file}'],
        ['--model=M4TinyMoE', '--logdir={empty}', '--baselines=/runs/no_placeholder'],
        ['--model=M4TinyMoE', '--logdir={empty}', '--baselines=/runs/{{lang}}', '--plot={missing}/x.png'],
        ['--model=M4TinyMoE', '--logdir={garbage_state}'],
        ['--model=NoSuchModel', '--logdir={empty}'],
    ],
    'input_benchmark': [['--data_dir={shape_manifest}'],
                        ['--data_dir={corpus}', '--input_params_override=no_such_param=1']],
    'learning_curves': [['--runs=a={file}'], ['--runs=a={bad_log}']],
    'list_models': [['--params=NoSuchModel']],
    'm4_report': [['--add=garbage'], ['--data_dir={garbage_manifest}', '--runs_dir={empty}', '--out_dir={new}']],
    'model_analysis': [['--model=M4TinyMoE', '--model_params_override=no.such.key : 1']],
    'model_benchmark': [['--models=M4TinyMoE', '--modes=bogus']],
    'moe_benchmark': [['--sweep_experts=8,abc']],
    'prepare_data': [
        ['--data_dir={garbage_manifest}', '--verify'],
        ['--data_dir={shape_manifest}', '--verify'],
        ['--data_dir={file}', '--verify'],
        ['--data_dir={file}', '--nogettext', '--tsv=de={tsv}'],
        ['--data_dir={new}', '--nogettext'],
        ['--data_dir={new}', '--nogettext', '--tsv=garbage'],
        ['--data_dir={new}', '--nogettext', '--tsv=de={missing}'],
        ['--data_dir={new}', '--nogettext', '--tsv=de={tsv}'],
        ['--data_dir={new}', '--locale_roots={mo_tree}'],
        ['--data_dir={new}', '--locale_roots={file}'],
    ],
    'train_baselines': [['--data_dir={garbage_manifest}']],
    'translate': [['--model=M4TinyMoE', '--logdir={garbage_state}', '--input={tsv}'], ['--saved_model={file}']],
    'trainer': [
        ['--model=M4TinyMoE', '--logdir={new}', '--data_dir={garbage_manifest}'],
        ['--model=M4TinyMoE', '--logdir={file}', '--data_dir={corpus}', _TINY],
        ['--model=M4TinyMoE', '--logdir={new}', '--data_dir={corpus}', '--model_params_override=no.such.key : 1'],
        ['--model=M4TinyMoE', '--logdir={garbage_state}', '--data_dir={corpus}', _TINY],
        ['--model=M4TinyMoE', '--logdir={bad_log}', '--data_dir={corpus}', _TINY],
    ],
}
# Files a refused command may leave (none: a trainer that refuses a resume removes the lock file it made).
_LEFT_BEHIND = {}


def _DirFlags(tool):
  """String flags of tools/<tool>.py named like directories (…dir, logdir, root)."""
  tree = ast.parse(open(os.path.join(_REPO, 'tools', f'{tool}.py')).read())
  return [node.args[0].value for node in ast.walk(tree)
          if isinstance(node, ast.Call) and getattr(node.func, 'attr', '') == 'DEFINE_string'
          and node.args[0].value.endswith(('dir', 'root'))]


def _Cases():
  out = []
  for tool in _TOOLS:
    for args in _CASES.get(tool) or [[f'--{flag}={{file}}' for flag in _DirFlags(tool)] or ['--no_such_flag']]:
      out.append((tool, tuple(args)))
  return out


def _MakePaths(root, corpus):
  """The placeholders' paths under `root` (see above), made afresh."""
  rng = random.Random(35)
  paths = {name: os.path.join(root, name) for name in ('empty', 'file', 'new', 'corpus', 'garbage_manifest',
                                                       'shape_manifest', 'garbage_state', 'bad_log', 'tsv',
                                                       'mo_tree')}
  paths['missing'] = os.path.join(root, 'missing', 'deeper')
  os.makedirs(paths['empty'])
  with open(paths['file'], 'w') as f:
    f.write('not a directory\n')
  shutil.copytree(corpus, paths['corpus'])
  for name, data in (('garbage_manifest', rng.randbytes(300)), ('shape_manifest', b'{"languages": []}')):
    os.makedirs(paths[name])
    with open(os.path.join(paths[name], build.MANIFEST), 'wb') as f:
      f.write(data)
  for name, file_name, data in (('garbage_state', 'checkpoint', rng.randbytes(200)),
                                ('bad_log', 'checkpoints.jsonl', b'{"step": 1, "checkpoint": "ckpt-1"}\n')):
    os.makedirs(paths[name])
    with open(os.path.join(paths[name], file_name), 'wb') as f:
      f.write(data)
  with open(paths['tsv'], 'wb') as f:
    f.write(rng.randbytes(500))
  for locale in ('de', 'fr'):
    data_helpers.WriteLocaleTree(paths['mo_tree'], {(locale, 'app'): []})
    with open(os.path.join(paths['mo_tree'], locale, 'LC_MESSAGES', 'app.mo'), 'wb') as f:
      f.write(rng.randbytes(400))
  return paths


def _Snapshot(root):
  """Every file and directory under root with its size and modification time (files)."""
  out = {}
  for base, dirs, files in os.walk(root):
    for name in dirs:
      out[os.path.relpath(os.path.join(base, name), root)] = 'dir'
    for name in files:
      st = os.stat(os.path.join(base, name))
      out[os.path.relpath(os.path.join(base, name), root)] = (st.st_size, st.st_mtime_ns)
  return out


def _Run(root, corpus, tool, args):
  paths = _MakePaths(root, corpus)
  cwd = os.path.join(root, 'cwd')
  os.makedirs(cwd)
  before = _Snapshot(root)
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [_REPO, os.environ.get('PYTHONPATH')])))
  start = time.time()
  try:
    out = subprocess.run([sys.executable, '-m', f'lingvo_gshard.tools.{tool}'] + [a.format(**paths) for a in args],
                         capture_output=True, text=True, timeout=300, cwd=cwd, env=env)
    code, stderr = out.returncode, out.stderr
  except subprocess.TimeoutExpired as e:
    code, stderr = None, f'{e.stderr or ""}\n(timed out after {e.timeout} s)'
  after = _Snapshot(root)
  changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
  return code, stderr, changed, time.time() - start


@pytest.fixture(scope='module')
def results(tmp_path_factory):
  """(exit code, stderr, paths created or changed, seconds) of every case, run a few at a time (all of them,
  also when -k selects a few)."""
  corpus = input_helpers.BuildCorpus(str(tmp_path_factory.mktemp('corpus')), {'de': 40, 'ru': 20})
  with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
    futures = {case: pool.submit(_Run, str(tmp_path_factory.mktemp('case')), corpus, *case) for case in _Cases()}
  return {case: future.result() for case, future in futures.items()}


@pytest.mark.parametrize('case', _Cases(), ids=lambda case: f'{case[0]} {" ".join(case[1])}')
def test_bad_input_is_one_line_with_no_traceback_and_touches_nothing(results, case):
  tool, args = case
  code, stderr, changed, seconds = results[case]
  lines = [l for l in stderr.splitlines() if l.strip()]
  print(f'{seconds:.1f} s: {lines[-1] if lines else ""}')
  assert 'Traceback' not in stderr, stderr[-3000:]
  assert code != 0 and lines and lines[-1].startswith(f'{tool}: '), (code, stderr[-3000:])
  assert changed == sum((_LEFT_BEHIND.get((tool, arg), []) for arg in args), []), (changed, lines[-1])


def test_every_tool_is_scanned():
  assert len(_TOOLS) >= 13 and {tool for tool, _ in _Cases()} == set(_TOOLS) and set(_CASES) <= set(_TOOLS)
