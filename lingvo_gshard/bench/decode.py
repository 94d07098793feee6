"""Beam-search decoding speed against Hugging Face `transformers`' NLLB-MoE `generate`, in the same process.

Both sides get the same model shape (the M4Tiny MoE with experts as wide as the dense FFN: D, F, layers,
experts every other layer, vocabulary), random weights, the same batches of real source sentences (token ids
of our source vocabulary, folded into the shared vocabulary HF's model has) and the same number of output
tokens per sentence: ours decodes exactly `length` steps without its early stop, HF's generate is forced to
`length` new tokens (min = max). Threads: TF's default intra-op pool and torch's (set here) use every core.
"""
import os
import time
from typing import Callable, Dict, List, Sequence

import numpy as np
import tensorflow as tf

from lingvo_gshard.core import sharding
from lingvo_gshard.models import decoding

# Ids of the special tokens on both sides: 0 pad, 1 eos (ours), 2 the decoder's first token.
PAD, EOS, START = 0, 1, 2


def Batches(sentences: Sequence[Sequence[int]], batch_size: int, max_len: int) -> List[np.ndarray]:
  """[batch_size, L] id matrices (L = the batch's longest, capped at max_len; eos appended; 0-padded)."""
  out = []
  for i in range(0, len(sentences) - batch_size + 1, batch_size):
    chunk = [list(s)[:max_len - 1] + [EOS] for s in sentences[i:i + batch_size]]
    ids = np.zeros((batch_size, max(len(s) for s in chunk)), np.int64)
    for r, s in enumerate(chunk):
      ids[r, :len(s)] = s
    out.append(ids)
  return out


class Ours:
  """The project's BeamSearch on a TransformerMT built from an experiment's params (random weights)."""

  def __init__(self, root, beam_size: int, length: int, seed: int = 1):
    """`root`: experiment params (experiment.ExperimentParams, overrides applied)."""
    self.params = root.task.Copy().Set(fprop_dtype=decoding.DECODE_FPROP_DTYPE)  # as the evaluator decodes
    partitioner = sharding.Partitioner('none')
    with sharding.use(partitioner):
      self.model = self.params.Instantiate().InstantiateVariables(partitioner, seed)
    model = self.model

    @tf.function(jit_compile=True)
    def Decode(ids):
      segment = tf.cast(ids > 0, tf.int32)
      positions = tf.where(segment > 0, tf.range(tf.shape(ids)[1])[None], 0)
      start = tf.fill([tf.shape(ids)[0]], START)
      out, _ = decoding.BeamSearch(model, ids, segment, positions, start, EOS, length, beam_size=beam_size,
                                   early_stop=False)
      return out[:, 0]

    self._decode = Decode

  def __call__(self, ids: np.ndarray):
    return self._decode(tf.constant(ids.astype(np.int32))).numpy()


class HuggingFace:
  """transformers' NllbMoeForConditionalGeneration of the same shape, random weights, generate(num_beams)."""

  def __init__(self, task_params, beam_size: int, length: int, seed: int = 1):
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    self.torch = torch
    torch.manual_seed(seed)
    torch.set_num_threads(os.cpu_count() or 1)
    p = task_params
    moe = p.encoder.moe_tpl
    config = transformers.NllbMoeConfig(
        vocab_size=p.target_vocab_size, d_model=p.model_dim, encoder_layers=p.encoder.num_layers,
        decoder_layers=p.decoder.num_layers, encoder_attention_heads=p.num_heads,
        decoder_attention_heads=p.num_heads, encoder_ffn_dim=p.hidden_dim, decoder_ffn_dim=p.hidden_dim,
        num_experts=moe.num_experts, encoder_sparse_step=p.encoder.moe_every,
        decoder_sparse_step=p.decoder.moe_every, expert_capacity=10 ** 6, max_position_embeddings=1024,
        pad_token_id=PAD, eos_token_id=EOS, bos_token_id=START, decoder_start_token_id=START,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, moe_token_dropout=0.0)
    self.model = transformers.NllbMoeForConditionalGeneration(config).eval()
    self.vocab = p.target_vocab_size
    self.kwargs = dict(num_beams=beam_size, min_new_tokens=length, max_new_tokens=length, do_sample=False,
                       early_stopping=False, length_penalty=1.0)

  def __call__(self, ids: np.ndarray):
    torch = self.torch
    # Our source ids index a larger source vocabulary; HF's model has one shared one: fold them into it.
    folded = np.where(ids >= 3, 3 + (ids - 3) % (self.vocab - 3), ids)  # pad, eos, start stay
    with torch.inference_mode():
      x = torch.from_numpy(folded)
      return self.model.generate(input_ids=x, attention_mask=(x != PAD).long(), **self.kwargs).numpy()


def TimeDecoders(fns: Dict[str, Callable], batches: Sequence[np.ndarray], rounds: int) -> Dict[str, Dict]:
  """Warms each decoder up on the first batch of each shape, then times `rounds` passes over all batches,
  the decoders taking turns within each round (so a slower or busier stretch of the machine falls on both);
  returns {name: {'seconds' (best pass), 'sentences_per_second', 'rounds_sentences_per_second'}}."""
  for fn in fns.values():
    seen = set()
    for b in batches:
      if b.shape not in seen:
        seen.add(b.shape)
        fn(b)
  n = sum(len(b) for b in batches)
  times = {name: [] for name in fns}
  for _ in range(rounds):
    for name, fn in fns.items():
      start = time.perf_counter()
      for b in batches:
        fn(b)
      times[name].append(time.perf_counter() - start)
  return {name: {'seconds': min(t), 'sentences_per_second': n / min(t),
                 'rounds_sentences_per_second': [n / x for x in t]} for name, t in times.items()}
