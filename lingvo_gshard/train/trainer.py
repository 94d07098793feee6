"""The training loop of a registered experiment: input -> Learner steps -> logs, summaries, checkpoints.

What a run writes to its log directory (Lingvo/Praxis habits):
  params.txt                    every task, learner and input param, as `a.b.c : value` text;
  post_init_model_params.txt    every weight's shape, logical axes, mesh axes and per-device shape;
  train/, dev/                  TensorBoard summaries (loss, xent, aux loss, learning rate, tokens/s, and
                                every MoE layer's routing stats);
  ckpt-N.*                      checkpoints (weights, optimizer slots, step); a rerun resumes from the latest.
"""
import json
import os
import time
from typing import Callable, Dict, Optional

import numpy as np
import tensorflow as tf

from lingvo_gshard.core import experiment as experiment_lib
from lingvo_gshard.core import learner as learner_lib
from lingvo_gshard.core import sharding


def CheckpointObjects(model, optimizer=None) -> Dict[str, tf.Variable]:
  """Weights (and optimizer slots) by path, so checkpoints read like the params summary. The one key scheme
  that the trainer writes and the evaluator restores."""
  out = {f'w/{path}': v for path, v in model.IterVariables()}
  for path, slots in (optimizer.slots.items() if optimizer else ()):
    out.update({f'opt/{path}/{name}': v for name, v in slots.items()})
  return {k.replace('.', '/'): v for k, v in out.items()}


def _Clock(seconds: float) -> str:
  seconds = int(seconds)
  return f'{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}'


CHECKPOINT_LOG = 'checkpoints.jsonl'


class CheckpointMismatchError(ValueError):
  """A checkpoint's weights are not the model's (another architecture or experiment)."""


def _CheckpointName(key: str) -> str:
  # How tf.train.Checkpoint names a variable it tracks under `key` (TF escapes '/' as '.S').
  return key.replace('.', '..').replace('/', '.S') + '/.ATTRIBUTES/VARIABLE_VALUE'


def CheckCheckpoint(path: str, objects: Dict[str, tf.Variable]):
  """Raises CheckpointMismatchError, in one line naming the first differing weight, unless every weight in
  `objects` is in the checkpoint with its shape and the checkpoint has no model weight (`w/`) beyond them."""
  try:
    stored = dict(tf.train.list_variables(path))
  except (tf.errors.OpError, ValueError) as e:
    raise CheckpointMismatchError(f'{path}: unreadable checkpoint ({type(e).__name__}: '
                                  f'{str(e).splitlines()[0][:200]})') from None
  wanted = {_CheckpointName(k): (k, v) for k, v in objects.items()}
  for name, (key, var) in wanted.items():
    if name not in stored:
      raise CheckpointMismatchError(f'{path} does not match the model: it has no {key} {var.shape.as_list()} '
                                    '(trained with other params or another experiment?)')
    if list(stored[name]) != var.shape.as_list():
      raise CheckpointMismatchError(f'{path} does not match the model: {key} is {list(stored[name])} there, '
                                    f'{var.shape.as_list()} in the model')
  prefix = _CheckpointName('w/')[:-len('/.ATTRIBUTES/VARIABLE_VALUE')]
  extra = sorted(n for n in stored if n.startswith(prefix) and n not in wanted)
  if extra:
    key = extra[0][:-len('/.ATTRIBUTES/VARIABLE_VALUE')].replace('.S', '/').replace('..', '.')
    raise CheckpointMismatchError(f'{path} does not match the model: it has {len(extra)} weights the model '
                                  f'lacks, e.g. {key} {list(stored[extra[0]])} (trained with other params?)')


class Trainer:
  """Trains `experiment` under `partitioner`, logging to `logdir`."""

  def __init__(self, experiment: experiment_lib.Experiment, partitioner: sharding.Partitioner, logdir: str,
               data_dir: Optional[str] = None, overrides: str = '', max_steps: Optional[int] = None,
               log: Callable[[str], None] = print):
    self.exp, self.partitioner, self.logdir, self.log = experiment, partitioner, logdir, log
    self.params = experiment_lib.ExperimentParams(experiment, data_dir or '')
    self.overrides = experiment_lib.ApplyOverrides(self.params, overrides) if overrides else []
    if max_steps is not None:
      self.params.learner.max_steps = max_steps
    experiment_lib.ResolveLearner(self.params.learner)  # a decaying schedule ends where the run does
    self.task = self.params.task
    self.learner_p = self.params.learner
    self.inputs = {s: self.params.input.Get(s) if s in self.params.input else None for s in ('train', 'dev')}
    if self.inputs['train'] is None:
      raise ValueError(f'{type(experiment).__name__} has no Train() input; it can be analysed, not trained')
    self._CheckMemory()
    os.makedirs(logdir, exist_ok=True)
    self._WriteParams()
    self.learner = learner_lib.Learner(self.task, self.learner_p.optimizer, partitioner, self.learner_p.seed)
    with open(os.path.join(logdir, 'post_init_model_params.txt'), 'w') as f:
      f.write(self.learner.model.VariablesSummary(partitioner) + '\n')
    self.checkpoint = tf.train.Checkpoint(step=self.learner.global_step,
                                          **CheckpointObjects(self.learner.model, self.learner.optimizer))
    lp = self.learner_p
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, logdir, max_to_keep=lp.keep_checkpoints,
        keep_checkpoint_every_n_hours=lp.keep_checkpoint_every_n_hours or None)
    self.writers = {s: tf.summary.create_file_writer(os.path.join(logdir, s)) for s in ('train', 'dev')}
    self._resumed_seconds = None  # training seconds before this process, read at the first save

  def _CheckMemory(self):
    """Refuses, before allocating anything, a model whose weights and optimizer state cannot fit a device."""
    from lingvo_gshard.models import analysis  # pylint: disable=g-import-not-at-top
    model = self.task.Instantiate()  # declares weights only
    a = analysis.Analyze(type(self.exp).__name__, model, self.partitioner, tokens_per_step=1, seq_len=1)
    need = a.bytes_per_device * 2 + a.optimizer_bytes_per_device  # weights, their gradients, slots
    have = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    if need > have:
      raise ValueError(f'{type(self.exp).__name__} needs {need / 2**30:.1f} GiB per device for weights, '
                       f'gradients and optimizer state on mesh {self.partitioner.mesh}; this machine has '
                       f'{have / 2**30:.1f} GiB (analyse it with tools/model_analysis instead)')

  def _WriteParams(self):
    with open(os.path.join(self.logdir, experiment_lib.PARAMS_FILE), 'w') as f:
      f.write(f'# experiment: {type(self.exp).__module__}.{type(self.exp).__name__}\n')
      f.write(f'# partitioner: {self.partitioner}\n# rules:\n')
      f.write(''.join(f'#   {line}\n' for line in self.exp.ShardingRules().ToText().splitlines()))
      f.write(''.join(f'# override: {line}\n' for line in self.overrides))
      f.write(self.params.ToText())

  def Step(self) -> int:
    return int(self.partitioner.Fetch(self.learner.global_step))

  def Restore(self) -> int:
    """Restores the latest checkpoint (weights, optimizer state, step, and the training input's position once
    Train has attached its iterator); returns the step."""
    path = self.manager.latest_checkpoint
    if path:
      CheckCheckpoint(path, CheckpointObjects(self.learner.model, self.learner.optimizer))
      try:
        self.checkpoint.restore(path)
      except (tf.errors.OpError, ValueError) as e:
        if getattr(self.checkpoint, 'input', None) is None:
          raise CheckpointMismatchError(f'{path}: cannot restore ({type(e).__name__}: '
                                        f'{str(e).splitlines()[0][:200]})') from None
        # The input changed since (its params or the corpus): weights and step still restore, the input
        # starts again from its first batch.
        self.log(f'{path}: the input position does not restore into this input ({type(e).__name__}); '
                 'the input restarts from its first batch')
        tf.train.Checkpoint(step=self.learner.global_step, **CheckpointObjects(
            self.learner.model, self.learner.optimizer)).restore(path).expect_partial()
      self.log(f'restored {path} at step {self.Step()}')
    return self.Step()

  def _Summaries(self, split, metrics, step):
    with self.writers[split].as_default():
      for k, v in metrics.items():
        tf.summary.scalar(k, v, step=step)
    self.writers[split].flush()

  def Evaluate(self) -> Optional[Dict[str, float]]:
    """Mean dev metrics over `eval_batches` batches (token-weighted), or None without a Dev() input."""
    p = self.inputs.get('dev')
    if p is None:
      return None
    totals, tokens = {}, 0.0
    for i, batch in enumerate(p.Instantiate(log=lambda line: None).Dataset()):
      if i >= self.learner_p.eval_batches:
        break
      batch = {k: v.numpy() for k, v in batch.items()}
      m = {k: float(self.partitioner.Fetch(v)) for k, v in self.learner.EvalStep(batch).items()}
      n = m['num_tokens']
      tokens += n
      for k, v in m.items():
        totals[k] = totals.get(k, 0.0) + v * n
    if not tokens:
      return None
    return {k: v / tokens for k, v in totals.items()}

  def Train(self) -> Dict[str, float]:
    """Runs to `max_steps` (resuming), returns the last training metrics."""
    lp = self.learner_p
    latest = self.manager.latest_checkpoint
    # The checkpoint's step, read alone: the whole checkpoint is restored once, after the input exists.
    saved = int(tf.train.load_variable(latest, 'step/.ATTRIBUTES/VARIABLE_VALUE')) if latest else self.Step()
    if saved >= lp.max_steps:
      self.Restore()
      self.log(f'already at step {saved} >= max_steps {lp.max_steps}')
      return {}
    self.log(f'building the input (vocabularies, shuffle buffers of every language) for step {saved + 1}...')
    data = iter(self.inputs['train'].Instantiate(log=self.log).Dataset())
    # The iterator is part of the checkpoint: a resumed run reads the batches the uninterrupted one would
    # have read (position, shuffle buffers and mixture state), so its losses are the same step for step.
    self.checkpoint.input = data
    step = self.Restore()
    last, window_tokens, window_start = {}, 0.0, time.time()
    began = start = window_start
    start_step, input_seconds = step, None
    while step < lp.max_steps:
      batch = {k: v.numpy() for k, v in next(data).items()}
      first = input_seconds is None
      if first:
        input_seconds = time.time() - start
      metrics = self.learner.TrainStep(batch)
      step += 1
      if first:
        self.partitioner.Fetch(metrics['loss'])
        self.log(f'first batch after {input_seconds:.0f}s, first step (compiling it) '
                 f'{time.time() - start - input_seconds:.0f}s; training to step {lp.max_steps}')
        # Rates and the ETA count from here: neither start-up cost recurs.
        start, start_step, window_start = time.time(), step, time.time()
      else:
        window_tokens += float(batch['tgt_weights'].sum())
      if step % lp.log_interval == 0 or step == lp.max_steps:
        last = {k: float(self.partitioner.Fetch(v)) for k, v in metrics.items()}
        elapsed = time.time() - window_start
        last['target_tokens_per_sec'] = window_tokens / max(elapsed, 1e-9)
        self._Summaries('train', last, step)
        now = time.time()
        eta = (now - start) / max(step - start_step, 1) * (lp.max_steps - step)
        self.log(f'step {step:6d}/{lp.max_steps} loss {last["loss"]:.4f} xent {last["xent"]:.4f} '
                 f'aux {last["aux_loss"]:.3f} lr {last["learning_rate"]:.2e} '
                 f'{last["target_tokens_per_sec"]:.0f} tgt tok/s  elapsed {_Clock(now - began)} '
                 f'eta {_Clock(eta)}')
        if not np.isfinite(last['loss']):
          raise FloatingPointError(f'loss is {last["loss"]} at step {step}; last checkpoint kept')
        window_tokens, window_start = 0.0, time.time()
      if lp.eval_interval and step % lp.eval_interval == 0:
        self._RunEval(step)
      if step % lp.save_interval == 0 or step == lp.max_steps:
        self._Save(step, time.time() - began)
    if lp.eval_interval and step % lp.eval_interval:
      self._RunEval(step)
    return last

  def _Save(self, step, seconds):
    """Writes ckpt-<step> and appends {step, wall-clock of training so far} to checkpoints.jsonl (the x axis
    of learning curves against time; seconds add up across resumed runs)."""
    path = self.manager.save(checkpoint_number=step)
    log_path = os.path.join(self.logdir, CHECKPOINT_LOG)
    before = 0.0
    if os.path.exists(log_path):
      with open(log_path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
      before = max([r['train_seconds'] for r in rows if r['step'] < step] or [0.0])
    if self._resumed_seconds is None:
      self._resumed_seconds = before
    with open(log_path, 'a') as f:
      f.write(json.dumps({'step': step, 'checkpoint': os.path.basename(path),
                          'train_seconds': round(self._resumed_seconds + seconds, 1),
                          'time': time.strftime('%Y-%m-%dT%H:%M:%S')}) + '\n')

  def _RunEval(self, step):
    dev = self.Evaluate()
    if dev:
      self._Summaries('dev', dev, step)
      self.log(f'step {step:6d} dev loss {dev["loss"]:.4f} xent {dev["xent"]:.4f}')
