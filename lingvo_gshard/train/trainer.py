"""The training loop of a registered experiment: input -> Learner steps -> logs, summaries, checkpoints.

What a run writes to its log directory (Lingvo/Praxis habits):
  params.txt                    every task, learner and input param, as `a.b.c : value` text;
  post_init_model_params.txt    every weight's shape, logical axes, mesh axes and per-device shape;
  train/, dev/                  TensorBoard summaries (loss, xent, aux loss, learning rate, tokens/s, and
                                every MoE layer's routing stats);
  ckpt-N.*                      checkpoints (weights, optimizer slots, step); a rerun resumes from the latest;
  budget.json                   with learner.max_train_seconds: the steps the time budget fits (train/budget.py);
  data.json                     the corpus build trained on (name, version, fingerprint): a resume on another
                                build is refused, and reports name the corpus their scores come from.
"""
import dataclasses
import json
import os
import time
from typing import Callable, Dict, List, Optional, Tuple

import tensorflow as tf
from tensorflow.experimental import dtensor

from lingvo_gshard.core import experiment as experiment_lib
from lingvo_gshard.core import sharding
from lingvo_gshard.data import reader
from lingvo_gshard.input import pipeline
from lingvo_gshard.runtime import hardware
from lingvo_gshard.runtime import learner as learner_lib
from lingvo_gshard.runtime import step_runner
from lingvo_gshard.train import budget as budget_lib
from lingvo_gshard.train import checkpoints
from lingvo_gshard.train import corpus_identity
from lingvo_gshard.train import dev_metrics
from lingvo_gshard.train import divergence
from lingvo_gshard.train import signals as signals_lib
from lingvo_gshard.train import preflight
from lingvo_gshard.train import progress as _progress
from lingvo_gshard.utils import files
from lingvo_gshard.utils import provenance


def _Unless(restore: Callable, path: str):
  """Runs `restore`; a truncated or corrupt checkpoint file is checkpoints.Unreadable, in one line."""
  try:
    return restore()
  except (tf.errors.DataLossError, tf.errors.OutOfRangeError, IndexError) as e:
    raise checkpoints.Unreadable(f'{path}: unreadable checkpoint ({checkpoints.Brief(e)})') from None


Preempted = signals_lib.Preempted  # the trainer raises it: callers catch trainer.Preempted


class Diverged(FloatingPointError):
  """The training loss stayed far above its lowest (learner.divergence_factor) with on_divergence 'stop'."""


@dataclasses.dataclass
class _Run:
  """The training loop's state between its actions (one process's run from a restored step)."""
  step: int                                # the last step trained
  saved_step: int                          # the last step saved
  budget_start: float                      # clock value the time budget counts from
  last: Dict[str, float] = dataclasses.field(default_factory=dict)  # the last logged metrics
  skipped: int = 0                         # updates skipped for a non-finite loss
  input_seconds: Optional[float] = None    # until the first batch (None before it)
  first: bool = True                       # this step is the process's first
  compiling: bool = True                   # the next step traces the train step (again)
  compiled: bool = False                   # the step just run compiled it
  compile_seconds: float = 0.0
  step_began: float = 0.0
  decide_at: Optional[int] = None          # the step the time budget decides at
  timed_step: Optional[int] = None         # where the budget's step timing starts
  timed_since: Optional[float] = None      # and when the run got there
  deadline: Optional[float] = None         # when the budget ends (set by this process's decision)
  last_eval: float = 0.0                   # seconds of a dev evaluation, kept free before the deadline


LOCK_FILE = '.trainer.lock'  # held by the training process (files.ProcessLock): one trainer a log directory


class Trainer:
  """Trains `experiment` under `partitioner`, logging to `logdir`."""

  def __init__(self, experiment: experiment_lib.Experiment, partitioner: sharding.Partitioner, logdir: str,
               data_dir: Optional[str] = None, overrides: str = '', max_steps: Optional[int] = None,
               log: Callable[[str], None] = print, runner: Optional[step_runner.StepRunner] = None,
               max_train_seconds: Optional[float] = None, clock: Callable[[], float] = time.monotonic):
    """`runner` compiles the steps (default: StepRunner(partitioner), the machine's rule); `max_steps` and
    `max_train_seconds` replace the learner's (after `overrides`). `clock` is what the step timings, the
    time budget and the recorded wall-clock read; only its differences are used (a test advances it instead
    of sleeping)."""
    self.exp, self.partitioner, self.logdir, self.log = experiment, partitioner, logdir, log
    self._clock = clock
    self._ResolveParams(data_dir, overrides, max_steps, max_train_seconds)
    manifest = self._CheckBeforeWriting()
    self._BuildLearner(runner)
    self._OpenLogdir(manifest)
    self._resumed_seconds = None  # training seconds before this process, read at the first save
    self._commit = provenance.CodeCommit() if self.chief else ''  # recorded with every save
    self._dev_rows: Optional[List[Dict]] = None  # in-training dev evaluations, for early stopping
    self._dev_batches: Optional[List[Dict]] = None  # read at the first evaluation, scored at every one

  def _ResolveParams(self, data_dir, overrides, max_steps, max_train_seconds):
    """The run's params: the experiment's, the overrides, what it leaves to the machine, the flags, the
    time budget and the schedule's end."""
    self.params = experiment_lib.ExperimentParams(self.exp, data_dir or '')
    self.overrides = experiment_lib.ApplyOverrides(self.params, overrides) if overrides else []
    self.resolved = hardware.ResolveAuto(self.params)  # what the experiment leaves to this machine
    if max_steps is not None:
      self.params.learner.max_steps = max_steps
    if max_train_seconds is not None:
      self.params.learner.max_train_seconds = float(max_train_seconds)
    self.params.Validate()  # every declared domain and rule, naming the key as typed, before anything runs
    for name in ('train', 'dev', 'test'):  # your own SentencePiece models: checked, their files' sha256 kept
      if name in self.params.input and 'vocab' in self.params.input.Get(name):
        pipeline.CheckUserVocab(self.params.input.Get(name), f'input.{name}')
    self.budget = self._Budget()  # before the schedule's end is resolved: a recorded budget moves it
    experiment_lib.ResolveLearner(self.params.learner)  # a decaying schedule ends where the run does
    self.task = self.params.task
    self.learner_p = self.params.learner
    self.inputs = {s: self.params.input.Get(s) if s in self.params.input else None for s in ('train', 'dev')}
    if self.inputs['train'] is None:
      raise ValueError(f'{type(self.exp).__name__} has no Train() input; it can be analysed, not trained')

  def _CheckBeforeWriting(self) -> Dict:
    """Everything that can be checked before the log directory is touched; returns the corpus manifest."""
    # Builds the layers: bad layer params fail here, before any data or file is touched.
    preflight.CheckMemory(type(self.exp).__name__, self.task, self.inputs['train'], self.partitioner,
                          self.learner_p.optimizer, self.log)
    manifest = reader.LoadManifest(self.inputs['train'].data_dir)  # a missing or empty corpus: one line
    try:
      files.MakeDirs(self.logdir)
    except OSError as e:
      raise ValueError(f'--logdir {self.logdir}: cannot create it ({e.strerror})') from None
    # A URL (gs://) has no permission bits to ask: its first write says whether it may be written.
    if not files.IsUrl(self.logdir) and not os.access(self.logdir, os.W_OK):
      raise ValueError(f'--logdir {self.logdir}: not writable')
    return manifest

  def _BuildLearner(self, runner):
    """The model, its optimizer and compiled steps, and the checkpoint that holds them."""
    self.learner = learner_lib.Learner(self.task, self.learner_p.optimizer, self.partitioner,
                                       self.learner_p.seed, skip_nonfinite=self.learner_p.on_nonfinite == 'skip',
                                       runner=runner)
    self.log(self.learner.runner.Describe())
    self.checkpoint = tf.train.Checkpoint(step=self.learner.global_step, **checkpoints.CheckpointObjects(
        self.learner.model, self.learner.optimizer))
    # Several DTensor clients (hosts) may run this loop on one mesh: each reads the same input and saves its
    # shards of every checkpoint; only the first writes the text files, summaries and the state-file repair.
    multi = self.partitioner.backend == 'dtensor' and dtensor.num_clients() > 1
    self.client = dtensor.client_id() if multi else None
    self.chief = self.client in (None, 0)
    self.input_checkpoint = None  # multi-client: each client's input position, beside the checkpoint

  def _CheckLogdir(self, manifest: Dict):
    """The log directory's checkpoints and corpus record against this run (before anything is written in
    it); returns (this run's corpus identity, the recorded one)."""
    # Before the manager reads the state file.
    self.candidates = checkpoints.CheckpointCandidates(self.logdir, self.log, repair=self.chief)
    # Another model's checkpoints are refused before anything in the log directory is rewritten.
    self._objects = checkpoints.CheckpointObjects(self.learner.model, self.learner.optimizer)
    self._matching = set()  # checkpoints already checked against the model
    for path in self.candidates:
      try:
        checkpoints.CheckCheckpoint(path, self._objects)
        self._matching.add(path)
        break
      except checkpoints.Unreadable:
        continue  # Restore reports it and falls back
    data = corpus_identity.DataIdentity(manifest, self.inputs['train'].data_dir)
    return data, corpus_identity.CheckData(self.logdir, data, resuming=bool(self.candidates))

  def _OpenLogdir(self, manifest: Dict):
    """Checks the log directory's checkpoints and corpus against this run, then writes what the run is
    (params.txt, data.json, post_init_model_params.txt) and opens the checkpoint manager and summaries."""
    logdir = self.logdir
    self._lock = None
    lock_path = os.path.join(logdir, LOCK_FILE)
    lock_existed = files.Exists(lock_path)
    if self.chief:  # one trainer a log directory (the evaler job only reads it; other clients only save shards)
      try:
        self._lock = files.ProcessLock(lock_path).Acquire()
      except files.LockHeld as e:
        raise ValueError(f'--logdir {logdir}: another trainer is running in it ({e}); wait for it to end or '
                         'train into another --logdir') from None
      if not self._lock.held:
        self.log(f'--logdir {logdir}: object storage has no lock: a second trainer started on this log '
                 'directory would not be refused')
    try:
      data, recorded = self._CheckLogdir(manifest)
    except BaseException:
      # A refused resume leaves the log directory as it found it: no lock file of this trainer's.
      if self._lock is not None and self._lock.held:
        if not lock_existed:
          files.Remove(lock_path)  # while still held: no other trainer can have taken this file meanwhile
        self._lock.Release()
      raise
    if self.chief:
      self._WriteParams()
      # A run resumed from before data.json existed keeps no record: its first steps' corpus is unknown.
      if recorded or not self.candidates:
        files.WriteJson(os.path.join(logdir, corpus_identity.DATA_FILE), data)
      files.WriteText(os.path.join(logdir, 'post_init_model_params.txt'),
                      self.learner.model.VariablesSummary(self.partitioner) + '\n')
    lp = self.learner_p
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, logdir, max_to_keep=lp.keep_checkpoints,
        keep_checkpoint_every_n_hours=lp.keep_checkpoint_every_n_hours or None)
    self.writers = {s: tf.summary.create_file_writer(os.path.join(logdir, s)) if self.chief else
                    tf.summary.create_noop_writer() for s in ('train', 'dev')}

  def _Budget(self) -> Optional[budget_lib.TimeBudget]:
    """The time budget still to be decided (None: no budget, or one decided before, whose max_steps this
    sets: a resumed run trains to the same step with the same schedule)."""
    lp = self.params.learner
    if 'max_train_seconds' not in lp or not lp.max_train_seconds:
      return None
    opt = lp.optimizer
    follows = 'total_steps' in opt and not opt.total_steps and opt.schedule != 'rsqrt'
    self._budget_moves_schedule = follows
    budget = budget_lib.TimeBudget(lp.max_train_seconds, lp.max_steps,
                                   opt.warmup_steps if follows else lp.max_steps, lp.eval_interval,
                                   min_steps=opt.warmup_steps if follows else 0)
    recorded = budget.Recorded(self.logdir)
    if recorded is None:
      return budget
    self.log(f'time budget {budget.seconds:g} s: max_steps {recorded} (decided before, '
             f'{budget_lib.BUDGET_FILE})')
    lp.max_steps = recorded
    return None

  def _DecideBudget(self, step: int, elapsed: float, seconds_per_step: float, compile_seconds: float,
                    evaluate: bool) -> Tuple[bool, float]:
    """Fixes max_steps from the timings so far (and a timed dev evaluation if the run evaluates), records
    it, moves the schedule's end; returns (whether the train step must compile again, an evaluation's
    seconds)."""
    started, eval_seconds = self._clock(), 0.0
    if evaluate and self.learner_p.eval_interval:
      self.Evaluate()  # compiles the eval step and reads the dev batches: paid once a run, here
      timed = self._clock()
      self.Evaluate()  # what each later evaluation costs
      eval_seconds = self._clock() - timed
    recompile = compile_seconds if self._budget_moves_schedule else 0.0
    record = self.budget.Decide(step, elapsed + self._clock() - started, seconds_per_step, eval_seconds, recompile)
    lp = self.learner_p
    lp.max_steps = record['max_steps']
    if self.chief:
      self.budget.Record(self.logdir, record)
    if self._budget_moves_schedule:
      lp.optimizer.total_steps = lp.max_steps
      self.learner.SetScheduleEnd(lp.max_steps)
    if self.chief:
      self._WriteParams()  # what an evaluator restores: the run's max_steps and schedule as decided
    self.log(f'time budget {self.budget.seconds:g} s: {seconds_per_step:.3f} s a step over the steps timed, '
             f'a dev evaluation {eval_seconds:.1f} s, {record["elapsed_seconds"]:.0f} s spent: training to step '
             f'{lp.max_steps}' + (' (the cap, learner.max_steps)' if record['capped'] else '')
             + f' ({budget_lib.BUDGET_FILE})')
    self.budget = None
    return self._budget_moves_schedule, eval_seconds

  def _WriteParams(self):
    files.WriteText(os.path.join(self.logdir, experiment_lib.PARAMS_FILE), ''.join([
        f'# experiment: {type(self.exp).__module__}.{type(self.exp).__name__}\n',
        f'# partitioner: {self.partitioner}\n# rules:\n',
        ''.join(f'#   {line}\n' for line in self.exp.ShardingRules().ToText().splitlines()),
        ''.join(f'# override: {line}\n' for line in self.overrides),
        self.params.ToText()]))

  def Step(self) -> int:
    return int(self.partitioner.Fetch(self.learner.global_step))

  def Restore(self) -> int:
    """Restores the newest readable checkpoint (weights, optimizer state, step, and the training input's
    position once Train has attached its iterator); returns the step.

    A truncated or corrupt checkpoint is reported in one line and the previous one is used; if none of the
    checkpoints present can be read, CheckpointMismatchError (never a silent restart from step 0). A readable
    checkpoint of another model is CheckpointMismatchError at once.
    """
    for i, path in enumerate(self.candidates):
      try:
        if path not in self._matching:
          checkpoints.CheckCheckpoint(path, self._objects)
        self._RestoreFrom(path)
      except checkpoints.Unreadable as e:
        self.log(f'{e}; ' + ('trying the previous checkpoint' if i + 1 < len(
            self.candidates) else 'no older checkpoint'))
        continue
      self.log(f'restored {path} at step {self.Step()}')
      return self.Step()
    if self.candidates:
      raise checkpoints.CheckpointMismatchError(
          f'{self.logdir}: none of its {len(self.candidates)} checkpoints can be read; refusing to start again '
          'from step 0 (move them away to do that)')
    return self.Step()

  def _InputPath(self, checkpoint_path: str) -> str:
    return os.path.join(self.logdir, 'input', f'client-{self.client}', os.path.basename(checkpoint_path))

  def _RestoreFrom(self, path: str):
    """Everything in `path`; if only the input position cannot be restored (its params or the corpus changed
    since), the weights, optimizer state and step, and the input starts again from its first batch."""
    try:
      _Unless(lambda: self.checkpoint.restore(path), path)
    except checkpoints.Unreadable:
      raise
    except (tf.errors.OpError, ValueError) as e:
      if getattr(self.checkpoint, 'input', None) is None:
        raise checkpoints.CheckpointMismatchError(f'{path}: cannot restore ({checkpoints.Brief(e)})') from None
      self.log(f'{path}: the input position does not restore into this input ({type(e).__name__}); '
               'the input restarts from its first batch')
      _Unless(lambda: tf.train.Checkpoint(step=self.learner.global_step, **self._objects).restore(
          path).expect_partial(), path)
      return
    if self.input_checkpoint is not None:
      if files.Exists(self._InputPath(path) + '.index'):
        self.input_checkpoint.restore(self._InputPath(path))
      else:
        self.log(f'{self._InputPath(path)}: no input position saved; the input restarts from its first batch')

  def _Summaries(self, split, metrics, step, per_expert=None):
    """Scalars; and per MoE layer, the histogram over experts of each per-expert vector (`load`: share of
    first choices, `expert_fill`: share of the expert's slots used) plus its max and min, so an expert that
    starves or overflows shows in TensorBoard."""
    with self.writers[split].as_default():
      for k, v in metrics.items():
        tf.summary.scalar(k, v, step=step)
      for k, v in (per_expert or {}).items():
        tf.summary.histogram(k, v, step=step, buckets=min(len(v), 30))
        for name, value in ((f'{k}_max', v.max()), (f'{k}_min', v.min())):
          if name not in metrics:  # the step's own load_max stays the one written
            tf.summary.scalar(name, float(value), step=step)
    self.writers[split].flush()

  def Evaluate(self) -> Optional[Dict[str, float]]:
    """Mean dev metrics over `eval_batches` batches (token-weighted), or None without a Dev() input."""
    p = self.inputs.get('dev')
    if p is None:
      return None
    if self._dev_batches is None:
      self._dev_batches = dev_metrics.DevBatches(p, self.learner_p.eval_batches)
    return dev_metrics.DevMetrics(self.learner, self._dev_batches)

  def Train(self, evaluate: bool = True) -> Dict[str, float]:
    """Runs to `max_steps` (resuming), with dev evaluations every `eval_interval` steps if `evaluate`;
    returns the last training metrics. SIGTERM/SIGINT end the current step, save it and raise Preempted.
    The log directory's lock is released when it returns or raises (a new Trainer may then resume here)."""
    try:
      return self._Train(evaluate)
    finally:
      if self._lock is not None:
        self._lock.Release()

  def _Train(self, evaluate: bool) -> Dict[str, float]:
    lp = self.learner_p
    # The checkpoint's step, read alone: the whole checkpoint is restored once, after the input exists.
    saved = self.Step()
    for path in self.candidates:
      try:
        saved = checkpoints.Step(path)
        break
      except (tf.errors.OpError, ValueError, IndexError):
        continue  # Restore reports it
    if saved >= lp.max_steps:
      saved = self.Restore()  # the newest readable one: it may be older than the newest file
      if saved >= lp.max_steps:
        self.log(f'already at step {saved} >= max_steps {lp.max_steps}')
        return {}
    record = budget_lib.Read(self.logdir) if 'max_train_seconds' in lp and lp.max_train_seconds else None
    if record and record.get('stopped_at_step') and saved >= record['stopped_at_step']:
      self.log(f'stopped by the time budget at step {saved} before ({budget_lib.BUDGET_FILE})')
      return {}
    stopped = self.EarlyStopped()
    if stopped and stopped[0] <= saved:
      self.log(f'stopped early at step {stopped[0]} before: {stopped[1]}')
      return {}
    if self.chief:
      with self.writers['train'].as_default():  # what the run is, beside its curves (Lingvo's params summary)
        params_text = files.ReadText(os.path.join(self.logdir, experiment_lib.PARAMS_FILE))
        tf.summary.text('params', f'```\n{params_text}\n```', step=saved)
    self.log(f'building the input (vocabularies, shuffle buffers of every language) for step {saved + 1}...')
    with reader.CorruptRecords(self.inputs['train'].data_dir,
                               f'; met while building the input, the last checkpoint is step {saved}'):
      data = iter(self.inputs['train'].Instantiate(log=self.log).Dataset())
    began = self._clock()  # a time budget counts from here (the vocabularies are data preparation, not training)
    # The iterator is part of the checkpoint: a resumed run reads the batches the uninterrupted one would
    # have read (position, shuffle buffers and mixture state), so its losses are the same step for step.
    if self.client is None:
      self.checkpoint.input = data
    else:  # a multi-client save takes DTensors only: each client keeps its input position on its own
      self.input_checkpoint = tf.train.Checkpoint(input=data)
    step = self.Restore()
    # Evaluations past the restored step (a process killed after them) are redone; they are not history.
    self._dev_rows = [r for r in self._DevRows() if r['step'] <= step]
    spent = 0.0  # budget seconds of earlier processes (one killed before the budget was decided)
    if self.budget is not None and step:
      rows = files.ReadJsonl(os.path.join(self.logdir, checkpoints.CHECKPOINT_LOG))
      spent = max([r['train_seconds'] for r in rows if r['step'] <= step] or [0.0])
    with signals_lib.SignalsSaved() as signals:
      return self._Loop(data, step, signals, evaluate, began - spent)

  def _Loop(self, data, step, signals, evaluate, budget_start):
    """Trains from `step` to max_steps: each step is the list of named actions below, in order."""
    lp, run = self.learner_p, _Run(step=step, saved_step=step, budget_start=budget_start)
    self._divergence = divergence.DivergenceWatch(lp.divergence_factor, lp.divergence_patience)
    if step:
      rows = files.ReadJsonl(os.path.join(self.logdir, checkpoints.CHECKPOINT_LOG))
      self._divergence.Resume(([r for r in rows if r.get('step') == step] or [{}])[-1])
    progress = self._progress = _progress.Progress(self._clock, step)
    while run.step < lp.max_steps:
      batch, metrics = self._Step(data, run, progress)
      self._CheckFinite(metrics, run)
      if run.compiled:
        self._AfterCompiling(run, progress)
      else:
        progress.Count(float(batch['tgt_weights'].sum()))
      if run.step % lp.log_interval == 0 or run.step == lp.max_steps:
        self._LogStep(metrics, run, progress)
      self._TimeForBudget(run, progress, evaluate)
      stop = evaluate and lp.eval_interval and run.step % lp.eval_interval == 0 and self._RunEval(run.step)
      late = self._OutOfTime(run)
      if run.step % lp.save_interval == 0 or run.step == lp.max_steps or stop or late:
        self._SaveStep(run, progress)
      if stop:
        self._RaiseIfSignalled(signals, run)  # arrived during the evaluation: preempted, not finished
        return run.last
      if signals.received:
        if run.saved_step != run.step:
          self._SaveStep(run, progress)
        self._RaiseIfSignalled(signals, run)
      if late:
        break
    if evaluate and lp.eval_interval and run.step % lp.eval_interval:
      self._RunEval(run.step)
      self._RaiseIfSignalled(signals, run)
    return run.last

  def _Step(self, data, run: '_Run', progress: _progress.Progress):
    """Reads a batch and trains one step on it; returns (batch, metrics)."""
    with reader.CorruptRecords(self.inputs['train'].data_dir,
                               f'; stopped before step {run.step + 1}, the last checkpoint is step {run.saved_step}'):
      batch = {k: v.numpy() for k, v in next(data).items()}
    run.first = run.input_seconds is None
    if run.first:
      run.input_seconds = self._clock() - progress.began
    run.step_began, run.compiled = self._clock(), run.compiling
    metrics = self.learner.TrainStep(batch)
    run.step += 1
    return batch, metrics

  def _CheckFinite(self, metrics, run: '_Run'):
    """A non-finite loss or gradient: stops the run (learner.on_nonfinite 'stop') or counts a skipped update."""
    if float(self.partitioner.Fetch(metrics['finite'])):
      return
    if self.learner_p.on_nonfinite == 'stop':
      raise FloatingPointError(
          f'step {run.step}: loss {float(self.partitioner.Fetch(metrics["loss"]))}, gradient norm '
          f'{float(self.partitioner.Fetch(metrics["grad_norm"]))}; stopped before saving (last checkpoint: '
          f'step {run.saved_step}); learner.on_nonfinite : skip would skip such steps')
    run.skipped += 1
    self.log(f'step {run.step}: non-finite loss or gradient, update skipped ({run.skipped} so far)')

  def _AfterCompiling(self, run: '_Run', progress: _progress.Progress):
    """The step just run compiled the train step: says how long it took, and plans the budget's timing."""
    run.compile_seconds, run.compiling = self._clock() - run.step_began, False
    if self.budget is not None and run.decide_at is None:
      run.decide_at = self.budget.DecisionStep(run.step)
      # The second half of the steps before the decision is timed: the input pipeline's start-up (shuffle
      # buffers filling beside the first steps) slows the first half.
      run.timed_step = (run.step + run.decide_at) // 2  # DecisionStep leaves >= 5 steps: before decide_at
    if run.first:
      self.log(f'first batch after {run.input_seconds:.0f}s, first step (compiling it) '
               f'{run.compile_seconds:.0f}s; training to step {self.learner_p.max_steps}' + (
                   f' at most: the time budget decides after step {run.decide_at}' if run.decide_at else ''))
    else:
      self.log(f'step {run.step}: the train step compiled again in {run.compile_seconds:.0f}s')
    progress.Restart(run.step)

  def _LogStep(self, metrics, run: '_Run', progress: _progress.Progress):
    """Training summaries and the log line of this step."""
    fetched = {k: self.partitioner.Fetch(v) for k, v in metrics.items()}
    run.last = {k: float(v) for k, v in fetched.items() if v.ndim == 0}
    progress.Rate(run.last)
    run.last['skipped_steps'] = float(run.skipped)
    ratio = self._divergence.Ratio(run.last['loss'])
    self._Summaries('train', dict(run.last, loss_over_lowest=ratio), run.step,
                    {k: v for k, v in fetched.items() if v.ndim == 1})
    self.log(progress.Line(run.step, self.learner_p.max_steps, run.last))
    progress.NextWindow()
    self._CheckDivergence(run)

  def _CheckDivergence(self, run: '_Run'):
    """A finite loss far above its lowest for several log lines: stop without saving, or say so and go on."""
    why = self._divergence.Update(run.step, run.last['loss'])
    if why is None:
      return
    if self.learner_p.on_divergence == 'stop':
      raise Diverged(f'{why}; stopped without saving (last checkpoint: step {run.saved_step}); '
                     'learner.on_divergence : warn would train on')
    self.log(f'step {run.step}: {why}; training on (learner.on_divergence : warn)')

  def _TimeForBudget(self, run: '_Run', progress: _progress.Progress, evaluate: bool):
    """Times the steps before the budget's decision, and decides at its step (setting the deadline)."""
    if run.step == run.timed_step:
      run.timed_since = self._clock()
    if run.step != run.decide_at:
      return
    per_step = (self._clock() - run.timed_since) / (run.step - run.timed_step)
    seconds = self.budget.seconds
    run.compiling, run.last_eval = self._DecideBudget(run.step, self._clock() - run.budget_start, per_step,
                                                      run.compile_seconds, evaluate)
    if self.client is None:  # clients of one mesh must stop at the same step: they keep to max_steps
      run.deadline = run.budget_start + seconds
    run.decide_at = None
    progress.Restart(run.step)

  def _OutOfTime(self, run: '_Run') -> bool:
    """True when another step like this one and the end-of-run evaluation would no longer fit the budget
    (the machine slowed down after the decision); records and logs the stop."""
    lp = self.learner_p
    late = (run.deadline is not None and run.step < lp.max_steps
            and 2 * self._clock() - run.step_began + run.last_eval > run.deadline)
    if late and self.chief:
      budget_lib.RecordStop(self.logdir, run.step, self._clock() - run.budget_start)
    if late:
      self.log(f'step {run.step}: the time budget ends: stopping {lp.max_steps - run.step} steps before '
               f'max_steps {lp.max_steps} (the machine ran slower than timed)')
    return late

  def _SaveStep(self, run: '_Run', progress: _progress.Progress):
    self._Save(run.step, self._clock() - progress.began)
    run.saved_step = run.step

  def _RaiseIfSignalled(self, signals, run: '_Run'):
    if signals.received:
      raise signals_lib.Preempted(signals.received, os.path.join(self.logdir, f'ckpt-{run.step}'))

  def _Save(self, step, seconds):
    """Writes ckpt-<step> and appends {step, wall-clock of training so far, code commit} to checkpoints.jsonl
    (the x axis of learning curves against time, seconds adding up across resumed runs; the commit says what
    trained each stretch of a resumed run). A failed write (a full disk, a file-size limit, a permission
    change) is checkpoints.WriteFailed in one line; the checkpoint before stays the latest and restores."""
    latest = self.manager.latest_checkpoint
    try:
      path = self.manager.save(checkpoint_number=step)
      if self.input_checkpoint is not None:
        self.input_checkpoint.write(self._InputPath(path))
    except (tf.errors.OpError, OSError) as e:
      checkpoints.RemovePartial(self.logdir, step)
      raise checkpoints.WriteFailed(
          f'{os.path.join(self.logdir, f"ckpt-{step}")}: cannot write the checkpoint ({checkpoints.Brief(e)}); '
          f'the latest is still {os.path.basename(latest) if latest else "none"}') from None
    if not self.chief:
      return
    log_path = os.path.join(self.logdir, checkpoints.CHECKPOINT_LOG)
    if self._resumed_seconds is None:
      rows = files.ReadJsonl(log_path)
      self._resumed_seconds = max([r['train_seconds'] for r in rows if r['step'] < step] or [0.0])
    row = {'step': step, 'checkpoint': os.path.basename(path),
           'train_seconds': round(self._resumed_seconds + seconds, 1),
           'time': time.strftime('%Y-%m-%dT%H:%M:%S'), 'commit': self._commit, **self._divergence.State()}
    try:
      files.AppendText(log_path, json.dumps(row) + '\n')  # on gs:// the file is rewritten (utils/files.py)
    except OSError as e:
      raise checkpoints.WriteFailed(f'{log_path}: cannot append ({e.strerror or e}); {os.path.basename(path)} '
                                    'was written and is the latest') from None

  def _DevRows(self) -> List[Dict]:
    """The training loop's dev evaluations of this run (earlier processes' from dev_eval.jsonl, then this
    one's), for early stopping."""
    if self._dev_rows is None:
      self._dev_rows = dev_metrics.ReadDevLog(self.logdir, 'trainer')
    return self._dev_rows

  def EarlyStopped(self) -> Optional[Tuple[int, str]]:
    """(step, why) if the run's dev evaluations say early stopping ended it (a firing at max_steps is none)."""
    lp = self.learner_p
    return dev_metrics.FirstEarlyStop(self._DevRows(), lp.early_stop_patience, lp.early_stop_tolerance,
                                      lp.max_steps)

  def _RunEval(self, step) -> bool:
    """Dev evaluation at `step`; True if early stopping says training ends here."""
    dev = self.Evaluate()
    if not dev:
      return False
    self._Summaries('dev', dev, step)
    self.log(f'step {step:6d} dev loss {dev["loss"]:.4f} xent {dev["xent"]:.4f}')
    row = dev_metrics.DevRow(step, dev, job='trainer')
    if self.chief:
      dev_metrics.AppendDevLog(self.logdir, row)
    # Decided on the rows as the file keeps them, so a resumed run decides the same.
    self._dev_rows = [r for r in self._DevRows() if r['step'] < step] + [row]
    stopped = self.EarlyStopped()
    if stopped and stopped[0] == step:
      self.log(f'step {step:6d} early stop: {stopped[1]}')
      return True
    return False
