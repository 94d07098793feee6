"""Your own SentencePiece model (vocab.model_path): adopted into the pipeline's layout with its segmentation
unchanged, checked, refused in one line where it cannot serve, recorded by sha256, and trained with."""
import io
import os
import random

import numpy as np
import pytest
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as sp_model_pb2

from lingvo_gshard.core import sharding
from lingvo_gshard.data import reader
from lingvo_gshard.data import report as report_lib
from lingvo_gshard.input import tokenizer
from lingvo_gshard.input import user_vocab
from lingvo_gshard.train import trainer as trainer_lib
from trainer_test import _SmallMoE
from trainer_test import data_dir  # pylint: disable=unused-import  (the small built corpus fixture)

_SYLLABLES = ('ka ri to mu sen da ve lo ön fä ße ni ré che win dow fi le 開 保 閉 存 く る').split()


def _Text(n=3000, seed=0):
  """Sentences of made-up words from a few scripts' syllables: enough distinct pieces for a few hundred."""
  rng = random.Random(seed)
  words = [''.join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(1500)]
  return [' '.join(rng.choice(words) for _ in range(rng.randint(2, 8))) for _ in range(n)]


def _Train(path, vocab_size=250, **kw):
  """A model as SentencePiece trains one by default (unk 0, bos 1, eos 2, no pad) unless `kw` says."""
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(_Text()), model_writer=model, vocab_size=vocab_size,
                                 minloglevel=2, **kw)
  with open(path, 'wb') as f:
    f.write(model.getvalue())
  return str(path)


def _Pieces(model_bytes, texts):
  sp = spm.SentencePieceProcessor(model_proto=model_bytes)
  return [sp.EncodeAsPieces(t) for t in texts]


@pytest.mark.parametrize('size,kw', [(250, {}),
                                     (500, {'byte_fallback': True, 'user_defined_symbols': ['<sep>', '<2de>']}),
                                     (250, {'model_type': 'bpe', 'pad_id': 3})])
def test_a_model_of_sentencepieces_defaults_is_laid_out_with_its_segmentation_unchanged(tmp_path, size, kw):
  path = _Train(tmp_path / 'user.model', size, **kw)
  original = open(path, 'rb').read()
  tags = ['en', 'de', 'fr']
  model, record = user_vocab.Adopt(path, tags)
  vocab = tokenizer.Vocabulary(model, path)  # pad 0, eos 1 checked by the pipeline's own loader
  sp = spm.SentencePieceProcessor(model_proto=model)
  assert (sp.pad_id(), sp.eos_id(), sp.unk_id()) == (0, 1, 2)
  assert vocab.tags == tags and [vocab.TagId(t) for t in tags] == [3, 4, 5]
  texts = _Text(200, seed=3) + ['Fenster <sep> ünbekannt ∑', '']
  assert _Pieces(model, texts) == _Pieces(original, texts)  # the same segmentation, other ids
  for t in texts[:50]:
    assert vocab.Decode(vocab.Encode(t) + [tokenizer.EOS_ID, 0]) == spm.SentencePieceProcessor(
        model_proto=original).DecodeIds(spm.SentencePieceProcessor(model_proto=original).EncodeAsIds(t))
  had_de = '<2de>' in kw.get('user_defined_symbols', [])
  had_pad = 'pad_id' in kw
  assert record['tags_added'] == 3 - had_de and record['pad_added'] == (not had_pad)
  assert record['pieces'] == sp.GetPieceSize() == size + record['tags_added'] + record['pad_added']


def test_a_model_in_the_pipelines_layout_is_taken_as_it_is(tmp_path):
  model = tokenizer.TrainModel(_Text(), 400, ['en', 'de'])
  path = tmp_path / 'ours.model'
  path.write_bytes(model)
  adopted, record = user_vocab.Adopt(str(path), ['en', 'de'])
  assert record['tags_added'] == 0 and not record['pad_added'] and not record['reordered']
  assert _Pieces(adopted, _Text(50)) == _Pieces(model, _Text(50))
  pieces = lambda data: [p.piece for p in sp_model_pb2.ModelProto.FromString(data).pieces]
  assert pieces(adopted) == pieces(model)


def test_what_cannot_serve_is_refused_in_one_line_naming_the_file(tmp_path):
  garbage = tmp_path / 'garbage.model'
  garbage.write_bytes(random.Random(1).randbytes(400))
  with pytest.raises(report_lib.DataError, match=f'^{garbage}: not a SentencePiece model'):
    user_vocab.Adopt(str(garbage), ['en'])
  no_eos = _Train(tmp_path / 'no_eos.model', eos_id=-1)
  with pytest.raises(report_lib.DataError, match=r'no end-of-sentence piece \(trained with --eos_id=-1\)') as e:
    user_vocab.Adopt(no_eos, ['en'])
  assert '\n' not in str(e.value) and no_eos in str(e.value)
  clash = _Train(tmp_path / 'clash.model', control_symbols=['<2en>'])
  with pytest.raises(report_lib.DataError, match='<2en> is a piece of the model but not a user-defined one'):
    user_vocab.Adopt(clash, ['en'])


def test_the_declared_size_and_the_recorded_sha256_are_checked(data_dir, tmp_path):
  path = _Train(tmp_path / 'user.model', vocab_size=300)
  tags = len(reader.LoadManifest(data_dir)['languages']) + 1  # <2en> and every source language
  with pytest.raises(report_lib.DataError, match=rf'{tags + 301} pieces as adopted \(300 \+ {tags} language '
                                                 rf'tags \+ 1 pad\), but vocab.source_size is 600: set '
                                                 rf'vocab.source_size .* to {tags + 301}$'):
    tokenizer.EnsureVocabularies(data_dir, '', 'shared', 600, 600, user_models={'shared': (path, '')})
  src, tgt = tokenizer.EnsureVocabularies(data_dir, '', 'shared', tags + 301, tags + 301,
                                          user_models={'shared': (path, user_vocab.Sha256(path))})
  assert src is tgt and src.size == tags + 301
  with pytest.raises(report_lib.DataError, match='changed since the run recorded it'):
    tokenizer.EnsureVocabularies(data_dir, '', 'shared', tags + 301, tags + 301,
                                 user_models={'shared': (path, '0' * 64)})


def test_a_run_trains_with_a_users_model_and_records_its_sha256(data_dir, tmp_path):
  tags = len(reader.LoadManifest(data_dir)['languages']) + 1
  size = 600 - tags - 1  # so that the adopted model has the experiment's 600 pieces
  path = _Train(tmp_path / 'user.model', vocab_size=size)
  logdir = str(tmp_path / 'run')
  overrides = '; '.join(f'input.{split}.vocab.model_path : {path}' for split in ('train', 'dev', 'test'))
  exp = _SmallMoE(data_dir)
  trainer = trainer_lib.Trainer(exp, sharding.Partitioner('none'), logdir, overrides=overrides,
                                max_steps=3, log=lambda line: None)
  last = trainer.Train()
  assert np.isfinite(last['loss'])
  params = open(os.path.join(logdir, 'params.txt')).read()
  assert f"input.train.vocab.model_sha256 : '{user_vocab.Sha256(path)}'" in params
  bad = '; '.join(f'input.{split}.vocab.target_model_path : {path}' for split in ('train', 'dev', 'test'))
  with pytest.raises(ValueError, match=r"input.train.vocab.target_model_path: a shared vocabulary has one model"):
    trainer_lib.Trainer(exp, sharding.Partitioner('none'), str(tmp_path / 'run2'), overrides=bad,
                        log=lambda line: None)
  assert not os.path.exists(tmp_path / 'run2')
  small = _Train(tmp_path / 'small.model', vocab_size=250)
  wrong = '; '.join(f'input.{split}.vocab.model_path : {small}' for split in ('train', 'dev', 'test'))
  with pytest.raises(report_lib.DataError, match=rf'{small}: {251 + tags} pieces as adopted .* but '
                                                 r'input.train.vocab.source_size is 600'):
    trainer_lib.Trainer(exp, sharding.Partitioner('none'), str(tmp_path / 'run3'), overrides=wrong,
                        log=lambda line: None)
  assert not os.path.exists(tmp_path / 'run3')  # checked before anything is written
