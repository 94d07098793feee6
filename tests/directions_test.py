"""Translation directions (data/directions.py): keys, a corpus built in both directions with a split that no
sentence crosses, and the decoder's start tag of every example in the input pipeline."""
import pytest

from lingvo_gshard.data import build
from lingvo_gshard.data import corpus
from lingvo_gshard.data import directions
from lingvo_gshard.data import report
from lingvo_gshard.data import sources
import input_helpers


@pytest.mark.parametrize('key, want', [
    ('fr', ('fr', 'en')), ('fr-en', ('fr', 'en')), ('en-fr', ('en', 'fr')), ('de-fr', ('de', 'fr')),
    ('zh-CN', ('zh-CN', 'en')), ('en-zh-CN', ('en', 'zh-CN')), ('zh-CN-en', ('zh-CN', 'en')),
    ('sr-Latn', ('sr-Latn', 'en')), ('sr-Latn-de', ('sr-Latn', 'de')), ('ca-valencia', ('ca-valencia', 'en')),
    ('es-419', ('es-419', 'en')), ('en-pt_BR', ('en', 'pt_BR'))])
def test_keys_split_where_a_language_subtag_starts(key, want):
  assert directions.Parse(key) == want


def test_x_to_english_keeps_the_bare_tag():
  assert [directions.Normalize(k) for k in ('fr-en', 'fr', 'en-fr')] == ['fr', 'fr', 'en-fr']
  assert directions.Label('fr') == 'fr-en' and directions.Label('en-fr') == 'en-fr'
  assert directions.Languages(['fr', 'en-de', 'de-fr']) == ['en', 'fr', 'de']
  with pytest.raises(report.DataError, match="'de-de' translates de into itself"):
    directions.Parse('de-de')


def _Units(pairs_by_lang):
  return [sources.Unit(lang, f'{lang}.tsv', pairs) for lang, pairs in pairs_by_lang.items()]


def _Corpus(direction, pairs_by_lang, **kw):
  config = corpus.CorpusConfig(dev_fraction=0.2, test_fraction=0.2, max_dev=1000, max_test=1000,
                               direction=direction, **kw)
  rep = report.BuildReport()
  return corpus.Assemble(_Units(pairs_by_lang), config, rep), rep


def _Catalogs(n=300):
  """fr and de catalogs whose foreign sentences recur under several English ones ('Ouvrir' for 'Open' and
  'Open...'), as real catalogs do: a split by the English side alone would let them straddle splits."""
  english = [f'Item {i} of the list' for i in range(n)]
  return {lang: [(f'{lang} word {i % (n // 3)}', e) for i, e in enumerate(english)] for lang in ('fr', 'de')}


def test_both_directions_hold_each_pair_and_its_reverse_in_the_same_split():
  built, _ = _Corpus('both', _Catalogs())
  assert sorted(built.languages) == ['de', 'en-de', 'en-fr', 'fr']
  for lang in ('fr', 'de'):
    for split in corpus.SPLITS:
      forward = built.languages[lang].splits[split]
      assert sorted((t, s) for s, t in forward) == sorted(built.languages[f'en-{lang}'].splits[split])
  assert all(built.languages[k].splits[corpus.TEST] for k in built.languages)


def test_no_sentence_of_a_heldout_pair_is_in_any_directions_training_data():
  built, rep = _Corpus('both', _Catalogs())
  train = {}
  for key, lang in built.languages.items():
    source, target = directions.Parse(key)
    for s, t in lang.splits[corpus.TRAIN]:
      train.setdefault(source, set()).add(corpus.EnglishKey(s))
      train.setdefault(target, set()).add(corpus.EnglishKey(t))
  for key, lang in built.languages.items():
    source, target = directions.Parse(key)
    for split in (corpus.DEV, corpus.TEST):
      for s, t in lang.splits[split]:
        assert corpus.EnglishKey(s) not in train[source] and corpus.EnglishKey(t) not in train[target]
  assert rep.skips['heldout_seen_in_train'] > 0  # the recurring foreign sentences were there to drop


def test_x_to_english_split_is_the_one_it_always_was():
  """Only a corpus with another direction filters held-out pairs; X->English keeps its English-key split."""
  built, rep = _Corpus('xx-en', _Catalogs())
  for key, lang in built.languages.items():
    for s, t in lang.splits[corpus.TEST]:
      assert corpus.SplitOf(t, built.config) == corpus.TEST
  assert rep.skips['heldout_seen_in_train'] == 0
  assert sorted(built.languages) == ['de', 'fr']


def test_languages_select_a_language_in_every_direction_or_one_direction():
  built, _ = _Corpus('both', _Catalogs(), languages=('fr',))
  assert sorted(built.languages) == ['en-fr', 'fr']
  built, _ = _Corpus('both', _Catalogs(), languages=('en-fr',))
  assert list(built.languages) == ['en-fr']
  built, _ = _Corpus('both', _Catalogs(), num_languages=1)
  assert sorted(built.languages) == ['de', 'en-de']  # one language, both of its directions (ties by tag)


def test_tsv_files_name_their_direction():
  (key_de, _), (key_en_de, _), (key_de_fr, _) = sources.ParseLanguageFiles(
      ['de-en=a.tsv', 'en-de=b.tsv', 'de-fr=c.tsv'], '--tsv')
  assert (key_de, key_en_de, key_de_fr) == ('de', 'en-de', 'de-fr')
  with pytest.raises(report.DataError, match=r"--tsv=en-xq=a.tsv: 'xq' is not a registered language tag"):
    sources.ParseLanguageFiles(['en-xq=a.tsv'], '--tsv')


@pytest.fixture(scope='module')
def both_dirs(tmp_path_factory):
  """A small TSV corpus (de, ru) built in both directions, and its shared vocabulary."""
  root = str(tmp_path_factory.mktemp('both'))
  data_dir = f'{root}/data'
  files = input_helpers.WriteTsv(f'{root}/tsv', {'de': 400, 'ru': 250})
  config = corpus.CorpusConfig(dev_fraction=0.1, test_fraction=0.1, max_dev=40, max_test=40, direction='both')
  build.Build(data_dir, [sources.TsvSource(files)], config, log=lambda line: None)
  return data_dir, _Input(data_dir, 'train')


def _Input(data_dir, split):
  p = input_helpers.InputParams(data_dir, packing=False, split=split, repeat=False)
  p.vocab.Set(source_size=400, target_size=400)
  return p.Instantiate(lambda line: None)


def test_vocabulary_has_a_tag_per_language_not_per_direction(both_dirs):
  _, inp = both_dirs
  _, tgt_vocab = inp.Vocabularies()
  assert tgt_vocab.tags == ['en', 'de', 'ru']


@pytest.mark.parametrize('split', ['train', 'dev'])
def test_every_example_starts_from_its_target_languages_tag(both_dirs, split):
  """Rows of de->en start from <2en>, rows of en->de from <2de>: told apart by their target's script (English
  is ASCII; the stand-in German and Russian are not, input_helpers.Translate)."""
  data_dir, _ = both_dirs
  inp = _Input(data_dir, split)
  _, tgt_vocab = inp.Vocabularies()
  seen = set()
  for batch in inp.Dataset().as_numpy_iterator():
    for r in range(batch['src_ids'].shape[0]):
      if not batch['tgt_segment_ids'][r].any():
        continue
      target = tgt_vocab.Decode(batch['tgt_labels'][r])
      lang = 'en' if target.isascii() else 'ru' if any('а' <= c <= 'я' for c in target) else 'de'
      assert batch['tgt_ids'][r][0] == tgt_vocab.TagId(lang), target
      seen.add(lang)
  assert seen == {'en', 'de', 'ru'}


@pytest.fixture(scope='module')
def both_run(tmp_path_factory):
  """A 6-step run of the trainer tests' small MoE on input_helpers' corpus (de, ru, el, ja) built in both
  directions: (its experiment, log directory)."""
  from lingvo_gshard.core import sharding  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.train import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  from trainer_test import _SmallMoE  # pylint: disable=g-import-not-at-top
  root = str(tmp_path_factory.mktemp('both_run'))
  config = corpus.CorpusConfig(dev_fraction=0.1, test_fraction=0.1, max_dev=40, max_test=40, direction='both')
  build.Build(f'{root}/data', [sources.TsvSource(input_helpers.WriteTsv(f'{root}/tsv'))], config,
              log=lambda line: None)
  exp = _SmallMoE(f'{root}/data')
  trainer_lib.Trainer(exp, sharding.Partitioner('none'), f'{root}/run', log=lambda line: None).Train()
  return exp, f'{root}/run'


def test_beam_search_starts_each_row_from_its_own_target(both_run):
  """One batch mixing targets decodes each row as a batch of that target alone does (the start tag is per
  row: same hypotheses, same scores), and the tags make a difference (German and Russian scores of one
  source differ, even when a 6-step model emits little)."""
  from lingvo_gshard.data import reader  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.eval import evaluator  # pylint: disable=g-import-not-at-top
  exp, logdir = both_run
  ev = evaluator.Evaluator(exp, logdir, log=lambda line: None)
  english = [s for s, _ in reader.Pairs(exp.DATA_DIR, 'en-de', 'test')][:12]
  targets = ['de', 'ru', 'el', 'ja'] * 3
  mixed, _ = ev.TranslateNbest(english, targets=targets)
  alone = {t: ev.TranslateNbest(english, targets=[t] * len(english))[0] for t in set(targets)}
  for i, t in enumerate(targets):
    assert mixed[i][0][0] == alone[t][i][0][0]
    assert mixed[i][0][1] == pytest.approx(alone[t][i][0][1], abs=1e-4)
  assert all(abs(alone['de'][i][0][1] - alone['ru'][i][0][1]) > 1e-4 for i in range(len(english)))
  # gshard_translate --target_language goes through the same evaluator.
  from lingvo_gshard.serve import translator  # pylint: disable=g-import-not-at-top
  t = translator.FromRun(exp, logdir, log=lambda line: None)
  assert sorted(t.target_languages) == ['de', 'el', 'en', 'ja', 'ru'] and 'en' in t.source_languages
  assert t.TranslateNbest(english, target_language='ru')[0] == alone['ru']


def test_evaluation_scores_every_direction_with_its_targets_tokenizer(both_run):
  from lingvo_gshard.eval import evaluator  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.eval import heldout  # pylint: disable=g-import-not-at-top
  exp, logdir = both_run
  ev = evaluator.Evaluator(exp, logdir, log=lambda line: None)
  keys = ['de', 'en-de', 'ja', 'en-ja']
  out = ev.Evaluate(heldout.FromCorpus(exp.DATA_DIR, 'test', keys, 5, log=lambda line: None))
  assert sorted(out['languages']) == sorted(keys)
  averages = out['averages']
  for kind, members in (('xx-en', ['de', 'ja']), ('en-xx', ['en-de', 'en-ja'])):
    assert averages[f'{kind}/all']['languages'] == 2
    assert averages[f'{kind}/all']['chrf'] == pytest.approx(
        sum(out['languages'][k]['chrf'] for k in members) / 2)
  assert 'bleu_signature' not in out['languages']['de'] and 'tok:13a' in out['bleu_signature']
  assert 'tok:13a' in out['languages']['en-de']['bleu_signature']
  # Japanese: sacrebleu's ja-mecab where MeCab's packages are installed, else characters (stated).
  assert any(f'tok:{t}' in out['languages']['en-ja']['bleu_signature'] for t in ('ja-mecab', 'char'))


def test_export_translates_into_the_target_it_is_given(both_run, tmp_path):
  """The SavedModel's translate_to signature gives translate's hypotheses for each target; serving_default
  stays into English; a language the model has no tag for fails the call, naming it."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.data import reader  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.eval import evaluator  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.serve import export  # pylint: disable=g-import-not-at-top
  from lingvo_gshard.serve import translator  # pylint: disable=g-import-not-at-top
  exp, logdir = both_run
  ev = evaluator.Evaluator(exp, logdir, log=lambda line: None)
  export.Export(ev, 'SmallMoE', str(tmp_path / 'model'), log=lambda line: None)
  english = [s for s, _ in reader.Pairs(exp.DATA_DIR, 'en-de', 'test')][:6]
  served = translator.FromSavedModel(str(tmp_path / 'model'))
  assert sorted(served.target_languages) == ['de', 'el', 'en', 'ja', 'ru']
  for target in ('ru', 'en'):
    want, _ = ev.TranslateNbest(english, targets=[target] * len(english))
    got, _ = served.TranslateNbest(english, target_language=target)
    assert [g[0][0] for g in got] == [w[0][0] for w in want]
    assert [g[0][1] for g in got] == pytest.approx([w[0][1] for w in want], abs=1e-4)
  to = tf.saved_model.load(str(tmp_path / 'model')).signatures['translate_to']
  with pytest.raises(tf.errors.InvalidArgumentError, match='xx'):
    to(sources=tf.constant(english[:1]), target_languages=tf.constant(['xx']))
