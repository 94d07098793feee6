"""Tests of data/language_codes.py and of every place a language code comes in: refused with the closest tags,
or (a language of the user's own) accepted only when declared and then recorded in the manifest."""
import json
import os

from absl import flags
from absl.testing import flagsaver
import hypothesis
from hypothesis import strategies as st
import pytest

from lingvo_gshard.data import build
from lingvo_gshard.data import language_codes
from lingvo_gshard.data import report
from lingvo_gshard.data import sources
from lingvo_gshard.eval import heldout
from lingvo_gshard.input import mixture
from lingvo_gshard.tools import prepare_data
import data_helpers

_CORPUS = ['de', 'fr', 'fur', 'pt-BR', 'zh-CN', 'zh-TW', 'sr-Latn']


@pytest.mark.parametrize('code,closest', [
    ('fre', ['fr']), ('fra', ['fr']), ('French', ['fr']), ('FR', ['fr']), ('pt', ['pt-BR']),
    ('zh', ['zh-CN', 'zh-TW']), ('sr@latin', ['sr-Latn']), ('deu', ['de']), ('German', ['de']),
])
def test_closest_finds_the_same_language_spelled_as_the_corpus_spells_it(code, closest):
  assert language_codes.Closest(code, _CORPUS)[:len(closest)] == closest


def test_check_in_accepts_tags_and_locales_and_refuses_others_with_the_closest():
  assert language_codes.CheckIn(['fr', 'pt_BR', 'sr@latin'], _CORPUS, 'x', 'y') == ['fr', 'pt-BR', 'sr-Latn']
  with pytest.raises(report.DataError) as e:
    language_codes.CheckIn(['de', 'fre'], _CORPUS, '--languages', 'the corpus at /d')
  assert str(e.value) == ("--languages: language 'fre' is not in the corpus at /d; closest: fr (French), "
                          f'fur (Friulian) ({len(_CORPUS)} languages)')


def test_check_new_refuses_unregistered_and_nonstandard_tags_unless_declared():
  assert language_codes.CheckNew('frr', 'f') == 'frr'  # registered: Northern Frisian
  assert language_codes.CheckNew('pt_BR', 'f') == 'pt-BR'
  with pytest.raises(report.DataError, match=r"^--tsv=fx=a.tsv: 'fx' is not a registered language tag; to add "
                                             r'a language that has no tag, declare it with --new_languages=fx$'):
    language_codes.CheckNew('fx', '--tsv=fx=a.tsv')
  assert language_codes.CheckNew('fx', 'f', new_languages=('fx',)) == 'fx'
  with pytest.raises(report.DataError, match=r"^f: write 'fre' as fr \(French\), the tag the corpus uses"):
    language_codes.CheckNew('fre', 'f')


@pytest.mark.parametrize('bad', ['', 'x', 'a/b', '../x', 'abc-', 'ab--c', 'éé', 'abcdefghi'])
def test_declared_new_languages_must_be_tags(bad):
  with pytest.raises(report.DataError, match='is not a language tag'):
    language_codes.CheckDeclared([bad])


@hypothesis.settings(max_examples=300, deadline=None, derandomize=True)
@hypothesis.given(st.text(max_size=12))
def test_any_typed_code_is_a_tag_or_one_line(code):
  for check in (lambda: language_codes.CheckNew(code, '--languages'),
                lambda: language_codes.CheckIn([code], _CORPUS, '--languages', 'the corpus')):
    try:
      check()
    except report.DataError as e:
      assert '\n' not in str(e)  # the code is quoted with repr(): one line whatever was typed


def test_corpus_readers_name_the_closest(tmp_path):
  manifest = {'languages': {t: {'train': 1, 'dev': 1, 'test': 1} for t in _CORPUS}}
  with pytest.raises(report.DataError, match=r"^languages: language 'French' is not in .*closest: fr \(French\)"):
    mixture.CheckLanguages(manifest, ['French'], str(tmp_path))
  (tmp_path / 'fre.tsv').write_text('a\tb\n')
  with pytest.raises(report.DataError, match=r"fre.tsv: language 'fre' is not in the languages the model was "
                                             r'trained on; closest: fr'):
    heldout.FromTsvDir(str(tmp_path), _CORPUS)


def test_unregistered_catalog_locales_are_skipped_and_counted(tmp_path):
  english = data_helpers.Sentences(40)
  root = data_helpers.WriteLocaleTree(str(tmp_path / 'locale'), {
      ('de', 'app'): [(e, 'de ' + e) for e in english],
      ('xq', 'app'): [(e, 'xq ' + e) for e in english],  # a two-letter code no language has
  })
  rep = report.BuildReport()
  tags = [u.tag for u in sources.GettextSource([root]).Units(rep)]
  assert tags == ['de']
  assert rep.skips['unknown_language'] == 1
  assert [reason for _, reason in rep.skipped_files] == ["'xq' is not a registered language tag"]


def _Build(tmp_path, capsys, **overrides):
  with flagsaver.flagsaver():
    flags.FLAGS(['prepare_data', f'--data_dir={tmp_path / "data"}'])
    for name, value in overrides.items():
      flags.FLAGS[name].value = value
    status = prepare_data.main(['prepare_data'])
  return status, capsys.readouterr().err.strip().splitlines()[-1]


def test_a_new_language_is_built_only_when_declared_and_recorded(tmp_path, capsys):
  tsv = tmp_path / 'xq.tsv'
  tsv.write_text(''.join(f'xq {e}\t{e}\n' for e in data_helpers.Sentences(30)))
  spec = [f'xq={tsv}']
  status, line = _Build(tmp_path, capsys, gettext=False, tsv=spec)
  assert (status, line) == (1, f"prepare_data: error: --tsv=xq={tsv}: 'xq' is not a registered language tag; "
                               'to add a language that has no tag, declare it with --new_languages=xq')
  assert not os.path.exists(tmp_path / 'data')
  status, _ = _Build(tmp_path, capsys, gettext=False, tsv=spec, new_languages=['xq'], dev_fraction=0.1,
                     test_fraction=0.1)
  assert status == 0
  with open(tmp_path / 'data' / build.MANIFEST, encoding='utf-8') as f:
    manifest = json.load(f)
  assert list(manifest['languages']) == ['xq'] and manifest['config']['new_languages'] == ['xq']


def test_declaring_no_new_language_keeps_the_fingerprint_of_builds_that_predate_the_setting():
  """Nor does the default direction (X->English): both settings came after builds that are still in use."""
  from lingvo_gshard.data import corpus  # pylint: disable=g-import-not-at-top
  rep = report.BuildReport()
  old_style = json.dumps({'pipeline': build.PIPELINE_VERSION, 'config': {
      k: v for k, v in corpus.CorpusConfig().__dict__.items() if k not in ('new_languages', 'direction')},
                          'inputs': []},
                         sort_keys=True)
  import hashlib  # pylint: disable=g-import-not-at-top
  assert build._Fingerprint(corpus.CorpusConfig(), rep) == hashlib.sha256(old_style.encode()).hexdigest()
  assert build._Fingerprint(corpus.CorpusConfig(new_languages=('xq',)), rep) != build._Fingerprint(
      corpus.CorpusConfig(), rep)
  assert build._Fingerprint(corpus.CorpusConfig(direction='both'), rep) != build._Fingerprint(
      corpus.CorpusConfig(), rep)
