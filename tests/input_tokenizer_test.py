"""Tests of lingvo_gshard/input/tokenizer.py: round trips in Python and in TensorFlow, reserved ids and
language tags, the temperature-sampled text sample, determinism, separate models, stored settings."""
import collections
import os
import re

import numpy as np
import pytest
from sentencepiece import sentencepiece_model_pb2 as sp_model_pb2
import tensorflow as tf

from lingvo_gshard.data import reader
from lingvo_gshard.data import report
from lingvo_gshard.input import mixture
from lingvo_gshard.input import tokenizer
import input_helpers

_SIZE = 600


def _Quiet(line):
  del line


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  return input_helpers.BuildCorpus(str(tmp_path_factory.mktemp('corpus')))


@pytest.fixture(scope='module')
def shared(data_dir, tmp_path_factory):
  vocab_dir = str(tmp_path_factory.mktemp('vocab'))
  src, tgt = tokenizer.EnsureVocabularies(data_dir, vocab_dir, 'shared', _SIZE, _SIZE, sample_sentences=3000,
                                          log=_Quiet)
  assert src is tgt
  return src


def _AllText(data_dir):
  text = []
  for lang in reader.Languages(data_dir):
    for split in ('train', 'dev'):
      text += [x for pair in reader.Pairs(data_dir, lang, split) for x in pair]
  return text


def test_round_trip_python_and_tensorflow(data_dir, shared):
  text = _AllText(data_dir) + [
      'Ünïcödé   with  spaces ', 'ﬁ ligature and full-width ＡＢＣ',  # Normalised: NFKC, whitespace.
      '漢字かな交じり文 🙂 ½', 'Ελληνικά και русский', '',  # Unseen characters: byte pieces.
  ]
  assert len(text) > 1500
  normalized = [shared.Normalize(x) for x in text]
  assert normalized[-5:-3] == ['Ünïcödé with spaces', 'fi ligature and full-width ABC']
  ids = [shared.Encode(x) for x in text]
  assert [shared.Decode(i) for i in ids] == normalized
  assert not any(tokenizer.UNK_ID in i for i in ids)  # Byte fallback: nothing becomes <unk>.
  # The tf.data tokenizer gives the same ids, and detokenizes them back in-graph.
  ragged = shared.Tokenize(tf.constant(text))
  assert ragged.to_list() == ids
  assert [x.decode('utf-8') for x in shared.Detokenize(ragged).numpy()] == normalized


def test_decode_stops_at_eos_and_drops_pad_and_tags(shared):
  sentence = shared.Encode('Open the file 12')
  row = [shared.TagId('en')] + sentence + [tokenizer.EOS_ID] + shared.Encode('junk after eos') + [0, 0]
  assert shared.Decode(row) == 'Open the file 12'
  dense = tf.constant([row, [shared.TagId('de')] + sentence[:2] + [0] * (len(row) - 3)])
  got = [x.decode() for x in shared.Detokenize(dense).numpy()]
  assert got == ['Open the file 12', shared.Decode(sentence[:2])]


def test_reserved_ids_and_language_tags(data_dir, shared):
  assert shared.size == _SIZE
  pieces = [shared._sp.IdToPiece(i) for i in range(3)]  # pylint: disable=protected-access
  assert pieces == ['<pad>', '</s>', '<unk>']
  assert (tokenizer.PAD_ID, tokenizer.EOS_ID, tokenizer.UNK_ID) == (0, 1, 2)
  assert shared.tags == ['en'] + reader.Languages(data_dir)  # en first, then the corpus' languages.
  assert [shared.TagId(t) for t in shared.tags] == list(range(3, 3 + len(shared.tags)))
  assert shared.num_reserved == 3 + len(shared.tags)
  # A tag in text is one piece, never split.
  assert shared.TagId('ru') in shared.Encode('<2ru> open')
  with pytest.raises(report.DataError, match=r"no tag piece <2xx> for language 'xx'"):
    shared.TagId('xx')


def test_sample_is_temperature_balanced_and_seeded(data_dir):
  counts = {lang: n['train'] for lang, n in reader.LoadManifest(data_dir)['languages'].items()}
  pairs = tokenizer.SamplePairs(data_dir, [], 1200, 5.0, seed=3, log=_Quiet)
  by_lang = {lang: reader.Pairs(data_dir, lang, 'train') for lang in counts}
  owner = {pair: lang for lang, ps in by_lang.items() for pair in ps}
  got = collections.Counter(owner[pair] for pair in pairs)
  assert got == mixture.Apportion(mixture.TemperatureWeights(counts, 5.0), 1200)
  # ja (~60 pairs) is up-sampled: each pair floor or ceil times; de (~400) down-sampled: none twice.
  ja = collections.Counter(p for p in pairs if owner[p] == 'ja')
  assert set(ja.values()) <= {got['ja'] // counts['ja'], got['ja'] // counts['ja'] + 1}
  assert len(ja) == counts['ja']
  assert got['ja'] > counts['ja'] and got['de'] < counts['de']
  assert max(collections.Counter(p for p in pairs if owner[p] == 'de').values()) == 1
  assert tokenizer.SamplePairs(data_dir, [], 1200, 5.0, seed=3, log=_Quiet) == pairs
  assert tokenizer.SamplePairs(data_dir, [], 1200, 5.0, seed=4, log=_Quiet) != pairs


def test_training_is_deterministic_and_settings_are_checked(data_dir, shared, tmp_path):
  lines = []
  again, _ = tokenizer.EnsureVocabularies(data_dir, str(tmp_path), 'shared', _SIZE, _SIZE,
                                          sample_sentences=3000, log=lines.append)
  assert again.model_bytes == shared.model_bytes
  # Progress while sampling and before training, then what was trained.
  assert lines[0].startswith('vocabulary sample: ') and 'languages read' in lines[0]
  assert 'training SentencePiece' in lines[-2] and lines[-1].startswith('trained')
  # A second call loads (no training), and other settings are refused naming the setting.
  lines.clear()
  loaded, _ = tokenizer.EnsureVocabularies(data_dir, str(tmp_path), 'shared', _SIZE, _SIZE,
                                           sample_sentences=3000, log=lines.append)
  assert loaded.model_bytes == shared.model_bytes and not lines
  with pytest.raises(report.DataError, match=r'spm_shared_600.model: trained with temperature=5.0, '
                     r'requested 1.0 \('):
    tokenizer.EnsureVocabularies(data_dir, str(tmp_path), 'shared', _SIZE, _SIZE, temperature=1.0,
                                 sample_sentences=3000, log=_Quiet)
  with pytest.raises(report.DataError, match='no such vocabulary'):
    tokenizer.EnsureVocabularies(data_dir, str(tmp_path), 'shared', 500, 500, train_if_missing=False)
  with pytest.raises(report.DataError, match='a shared vocabulary has one size'):
    tokenizer.EnsureVocabularies(data_dir, str(tmp_path), 'shared', 500, 400)
  os.remove(os.path.join(str(tmp_path), 'spm_shared_600.model.json'))
  with pytest.raises(report.DataError, match=r'model.json: missing or unreadable'):
    tokenizer.EnsureVocabularies(data_dir, str(tmp_path), 'shared', _SIZE, _SIZE, sample_sentences=3000)


def test_separate_models_learn_their_own_side(data_dir, tmp_path):
  src, tgt = tokenizer.EnsureVocabularies(data_dir, str(tmp_path), 'separate', 500, 350,
                                          sample_sentences=2000, log=_Quiet)
  assert (src.size, tgt.size) == (500, 350)
  assert sorted(os.listdir(tmp_path)) == ['spm_source_500.model', 'spm_source_500.model.json',
                                          'spm_target_350.model', 'spm_target_350.model.json']
  assert all(os.stat(tmp_path / name).st_mode & 0o777 == 0o644 for name in os.listdir(tmp_path))
  assert src.tags == tgt.tags and src.TagId('en') == tgt.TagId('en') == 3
  # The source model has Cyrillic and Greek pieces, the English one none (they fall back to bytes there).
  foreign = input_helpers.Translate('open the file', 'ru') + ' ' + input_helpers.Translate('save', 'el')
  def Bytes(vocab):
    return sum(vocab._sp.IsByte(i) for i in vocab.Encode(foreign))  # pylint: disable=protected-access
  assert Bytes(src) == 0 and Bytes(tgt) > 10
  assert src.Decode(src.Encode(foreign)) == tgt.Decode(tgt.Encode(foreign)) == foreign
  english = 'Open the file and save it'
  assert len(tgt.Encode(english)) <= len(src.Encode(english))


def test_missing_data_dir_and_unknown_language(tmp_path, data_dir):
  with pytest.raises(report.DataError, match=r'manifest.json: no finished gettext_m4 build here'):
    tokenizer.EnsureVocabularies(str(tmp_path / 'nothing'), '', 'shared', 100, 100)
  with pytest.raises(report.DataError, match=r"^languages: language 'xx' is not in .*manifest.json \(4 languages\)$"):
    tokenizer.EnsureVocabularies(data_dir, str(tmp_path), 'shared', 100, 100, languages=['de', 'xx'])
  with pytest.raises(report.DataError, match=r"kind must be 'shared' or 'separate', got 'both'"):
    tokenizer.EnsureVocabularies(data_dir, str(tmp_path), 'both', 100, 100)
  np.testing.assert_equal(tokenizer.TagPiece('pt-BR'), '<2pt-BR>')


def test_a_cut_or_changed_model_file_is_one_line_naming_it(data_dir, shared, tmp_path):
  tokenizer.EnsureVocabularies(data_dir, str(tmp_path), 'shared', _SIZE, _SIZE, sample_sentences=3000,
                               log=_Quiet)
  path = os.path.join(str(tmp_path), 'spm_shared_600.model')
  with open(path, 'rb') as f:
    model = f.read()
  with open(path, 'wb') as f:
    f.write(model[:len(model) // 3])  # a copy cut short
  with pytest.raises(report.DataError) as e:
    tokenizer.EnsureVocabularies(data_dir, str(tmp_path), 'shared', _SIZE, _SIZE, sample_sentences=3000)
  assert '\n' not in str(e.value) and str(e.value).startswith(f'{path}: ')
  # Another valid model in its place (here: one piece's score changed) parses, but is not the one trained.
  proto = sp_model_pb2.ModelProto.FromString(model)
  proto.pieces[10].score += 1.0
  with open(path, 'wb') as f:
    f.write(proto.SerializeToString())
  with pytest.raises(report.DataError, match=rf'^{re.escape(path)}: changed since it was trained'):
    tokenizer.EnsureVocabularies(data_dir, str(tmp_path), 'shared', _SIZE, _SIZE, sample_sentences=3000)
  with open(path, 'wb') as f:
    f.write(model)  # restored: loads again
  loaded, _ = tokenizer.EnsureVocabularies(data_dir, str(tmp_path), 'shared', _SIZE, _SIZE,
                                           sample_sentences=3000)
  assert loaded.model_bytes == shared.model_bytes
