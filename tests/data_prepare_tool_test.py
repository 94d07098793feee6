"""Tests of tools/prepare_data.py: the summary of a build, and one-line errors with exit status 1."""
import os
import subprocess
import sys

from absl import flags
from absl.testing import flagsaver
import pytest

from lingvo_gshard.tools import prepare_data
import data_helpers


def _Run(*args):
  return subprocess.run([sys.executable, '-m', 'lingvo_gshard.tools.prepare_data', *args],
                        capture_output=True, text=True, check=False, timeout=300)


def _Tree(root):
  english = data_helpers.Sentences(80)
  return data_helpers.WriteLocaleTree(root, {
      ('de', 'app'): [(e, 'de ' + e) for e in english],
      ('pt_BR', 'app'): [(e, 'pt ' + e) for e in english[:50]],
      ('ja', 'app'): [(e, 'ja ' + e) for e in english[:20]],
      ('en_GB', 'app'): [(e, e + ' (GB)') for e in english],
  })


def test_tool_builds_and_prints_the_summary_then_is_up_to_date(tmp_path):
  root = _Tree(str(tmp_path / 'locale'))
  args = [f'--data_dir={tmp_path / "data"}', f'--locale_roots={root}', '--dev_fraction=0.1',
          '--test_fraction=0.1', '--num_languages=2']
  result = _Run(*args)
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  assert lines[0].split() == ['lang', 'bucket', 'train', 'dev', 'test', 'inputs']
  rows = [l.split() for l in lines[1:3]]
  assert [r[:2] for r in rows] == [['de', 'high'], ['pt-BR', 'medium']]
  assert sum(int(x) for x in rows[0][2:5]) <= 80
  assert lines[3].startswith('2 languages; train ')
  assert lines[4] == 'left out: 1 smaller languages: ja (20)'
  assert any(l.startswith('skipped: ') and 'english_catalog 1' in l for l in lines)
  assert lines[-1] == f'built: {tmp_path / "data"}'
  assert 'read 3 inputs, 150 clean pairs' in result.stderr  # Progress (English catalogs are not inputs).
  again = _Run(*args)
  assert again.returncode == 0 and again.stdout.splitlines()[-1] == f'up to date: {tmp_path / "data"}'
  assert again.stdout.splitlines()[:-1] == lines[:-1]


def test_tool_fatal_error_is_one_line_with_exit_status_1(tmp_path):
  result = _Run(f'--data_dir={tmp_path / "data"}', f'--locale_roots={tmp_path / "missing"}')
  assert result.returncode == 1
  assert 'Traceback' not in result.stderr
  assert result.stderr.strip().splitlines()[-1] == (
      f'prepare_data: error: --locale_roots={tmp_path / "missing"}: no such directory')
  assert not os.path.exists(tmp_path / 'data')


@pytest.fixture(name='run_main')
def _RunMain(tmp_path, capsys):
  root = _Tree(str(tmp_path / 'locale'))

  def Run(**overrides):
    with flagsaver.flagsaver():
      flags.FLAGS(['prepare_data', f'--data_dir={tmp_path / "data"}', f'--locale_roots={root}'])
      for name, value in overrides.items():
        flags.FLAGS[name].value = value
      status = prepare_data.main(['prepare_data'])
    return status, capsys.readouterr().err.strip().splitlines()[-1]

  return Run


def test_tool_error_messages(run_main, tmp_path):
  status, line = run_main(languages=['de', 'xx'])
  assert (status, line) == (1, "prepare_data: error: --languages=xx: 'xx' is not a registered language tag; to "
                               'add a language that has no tag, declare it with --new_languages=xx')
  status, line = run_main(languages=['de', 'pt'])
  assert (status, line) == (1, "prepare_data: error: --languages: language 'pt' is not in the sources read; "
                               'closest: pt-BR (Portuguese (Brazil)) (3 languages)')
  status, line = run_main(tsv=['de:file.tsv'])
  assert (status, line) == (1, "prepare_data: error: --tsv: 'de:file.tsv' is not LANG=PATH or SOURCE-TARGET=PATH "
                               'with language codes such as de, pt_BR, en-de')
  status, line = run_main(tsv=[f'en-qq={tmp_path}/x.tsv'])
  assert (status, line) == (1, f"prepare_data: error: --tsv=en-qq={tmp_path}/x.tsv: 'qq' is not a registered "
                               'language tag; to add a language that has no tag, declare it with --new_languages=qq')
  status, line = run_main(tsv=[f'de-de={tmp_path}/x.tsv'])
  assert (status, line) == (1, f"prepare_data: error: --tsv=de-de={tmp_path}/x.tsv: 'de-de' translates de into "
                               'itself')
  status, line = run_main(languages=['en-zz'])
  assert status == 1 and line.startswith("prepare_data: error: --languages=en-zz: 'zz' is not a registered")
  status, line = run_main(tsv=[f'de={tmp_path}/none.tsv'])
  assert (status, line) == (1, f'prepare_data: error: --tsv=de={tmp_path}/none.tsv: no such readable file')
  status, line = run_main(gettext=False)
  assert (status, line) == (1, 'prepare_data: error: no input: --nogettext without --tsv or --tfds')
  status, line = run_main(dev_fraction=0.6, test_fraction=0.5)
  assert (status, line) == (1, 'prepare_data: error: dev_fraction + test_fraction must be < 1 (nothing left '
                               'to train on)')
  assert not os.path.exists(tmp_path / 'data')  # a build that fails leaves no directory behind


def test_tool_builds_from_tsv_files(run_main, tmp_path):
  (tmp_path / 'sw.tsv').write_text(''.join(f'sw {e}\t{e}\n' for e in data_helpers.Sentences(30)) + 'bad\n')
  status, _ = run_main(gettext=False, tsv=[f'sw={tmp_path}/sw.tsv'], dev_fraction=0.1, test_fraction=0.1)
  assert status == 0
  from lingvo_gshard.data import reader  # pylint: disable=g-import-not-at-top
  manifest = reader.LoadManifest(str(tmp_path / 'data'))
  assert list(manifest['languages']) == ['sw'] and manifest['skips']['tsv_bad_columns'] == 1
  total = sum(manifest['languages']['sw'][s] for s in ('train', 'dev', 'test'))
  assert total == 30
