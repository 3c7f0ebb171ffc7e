"""The task-agnostic trainer: the distributed step (Trainer) and the training loop (train).

One custom loop serves every tf.distribute strategy (one device, several GPUs, several workers,
TPUs): a `tf.function` runs up to `iterations_per_loop` steps per call (what TPUs need to keep
the host out of the way) and every step goes through `strategy.run`. There is no TPU-specific
branch in the step or the model.

What is specific to a task (pretraining, classification, SQuAD, tagging) comes in a `Task`: a
small named tuple of plain functions for its model inputs, its loss and its metric sums. The
loop owns everything else: gradient accumulation, clipping, the non-finite guard, checkpoints
and resume-by-skip, logging with rate and ETA, summaries and eval aggregation.

The concepts around it have modules of their own: where the run computes
(training.distribution: strategies, replicas, iterators, dtype policy), the run folder
(training.run_folder: checkpoints, lock, record, resume checks), stopping on SIGTERM or a lost
worker (training.stopping), evaluation and prediction (training.evaluation) and the error a run
raises (training.errors).

Batch sizes are global: `train_batch_size` examples go into every optimizer update, split over
the replicas and, with gradient accumulation, over micro-batches per replica. A task's loss is
written for the whole global batch: `normalizers` sums what its denominators need over every
replica and micro-batch, so one device, many devices and accumulation give the same update up
to float rounding.
"""

import time
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Set, Tuple

from absl import logging
import keras
import tensorflow as tf

from bert_tf import io
from bert_tf.model import checkpoints
from bert_tf.training import input_pipeline
from bert_tf.training import layer_selection
from bert_tf.training import optimization
from bert_tf.training import packed_rows
from bert_tf.training import run_folder
from bert_tf.training import stopping
from bert_tf.training.errors import TrainingError


Tensors = Mapping[str, tf.Tensor]


class Task(NamedTuple):
  """What the loop needs to know about a task: plain functions, no state.

  Attributes:
    model_inputs: batch -> the model's inputs (the batch also holds the labels).
    normalizers: batch -> {name: float32 scalar} summed over the replica's whole batch (all
      micro-batches); the loop all-reduces them over the replicas once per step and passes the
      global sums to replica_loss (e.g. pretraining's masked-LM weight total).
    replica_loss: (outputs, batch, global normalizers, examples per update) -> (loss, sums):
      this replica's share of the global batch's loss, such that the shares of all replicas
      and micro-batches add up to it, and float32 scalar metric sums named by sum_names.
    sum_names: the keys of replica_loss's sums; "examples" (the batch's example count) is one.
    train_metrics: (summed metric sums, number of good steps) -> {name: float}: the metrics
      logged and summarised after each loop ("loss" among them).
    eval_sums: (outputs, batch) -> {name: float32 scalar} sums over one eval batch.
    eval_results: list of per-batch eval sums (numpy) -> {name: float} for eval_results.txt.
  """
  model_inputs: Callable[[Tensors], Dict[str, tf.Tensor]]
  normalizers: Callable[[Tensors], Dict[str, tf.Tensor]]
  replica_loss: Callable[..., Any]
  sum_names: Tuple[str, ...]
  train_metrics: Callable[[Mapping[str, float], int], Dict[str, float]]
  eval_sums: Callable[[Tensors, Tensors], Dict[str, tf.Tensor]]
  eval_results: Callable[[List[Mapping[str, Any]]], Dict[str, float]]


# === Distributed steps ===


class Trainer:
  """Builds the distributed train and eval functions of a task's model under a strategy.

  Args:
    strategy: the tf.distribute strategy; `model` and `optimizer` must have been created (and
      the optimizer built) inside its scope.
    model: the task's Keras model.
    optimizer: from optimization.create_optimizer (a LossScaleOptimizer for float16).
    task: the task's functions (see Task).
    train_batch_size: global examples per update.
    gradient_accumulation_steps: micro-batches per update; the training dataset then yields
      stacked micro-batches [k, b, ...] per replica.
    jit_compile: compile the replica step with XLA.
    max_nonfinite_steps: with float16 loss scaling, stop after this many non-finite steps in a
      row (the scaler skips them); otherwise the first one stops training.
    clip_norm: gradients are clipped to this global norm (the original's 1.0).
    step_model: the model the training step runs and trains (default: `model`): one sharing
      `model`'s layers whose outputs add what a task's loss reads beyond the model's own
      outputs, and whose trainable variables may add weights that train with the model but are
      not part of it (intermediate distillation's projection, training/distillation/
      features.py). Evaluation and prediction run `model`.
    towers: each replica's (micro-)batch is split along its first axis into this many towers,
      computed as independent branches of one graph and summed: the same update (the loss
      is normalized over the global batch either way), for CPUs, where towers of one-thread
      ops keep the cores busier than ops that each split their work over the cores
      (use_cpu_towers). Training batches must have a static first axis divisible by it;
      evaluation batches that do not are computed as one tower.

  Size: the step's knobs are independent settings of one object (each with its default), which
  a settings object would only rename.
  """

  def __init__(self, strategy, model, optimizer, task: Task, train_batch_size: int,
               gradient_accumulation_steps: int = 1, jit_compile: bool = False,
               max_nonfinite_steps: int = 5, clip_norm: float = 1.0, towers: int = 1,
               step_model=None):
    self.strategy = strategy
    self.model = model
    self.step_model = model if step_model is None else step_model
    self.optimizer = optimizer
    self.task = task
    self.train_batch_size = train_batch_size
    self.accumulation = gradient_accumulation_steps
    self.clip_norm = clip_norm
    if towers < 1:
      raise ValueError(f"towers must be >= 1, got {towers}")
    self.towers = towers
    self.loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    # A float16 loss scaler skips overflowing steps itself; otherwise one non-finite loss stops.
    self.max_nonfinite_steps = max_nonfinite_steps if self.loss_scaled else 1
    # Without AutoGraph: the loops are tf.while_loop and every branch on a tensor is tf.cond
    # or tf.where, so tracing runs the model's Python as written (converting it, every layer
    # call included, costs more than the trace itself for small models).
    self._replica_step = tf.function(self._replica_step_fn, jit_compile=jit_compile,
                                     autograph=False)
    self.train_loop = tf.function(self._train_loop_fn, autograph=False)
    self.eval_step = tf.function(self._eval_step_fn, autograph=False)
    self.predict_step = tf.function(self._predict_step_fn, autograph=False)

  def replica_loss(self, batch, normalizers, training: bool = True):
    """The task's loss and sums of this replica's (micro-)batch, given global normalizers."""
    outputs = self.step_model(self.task.model_inputs(batch), training=training)
    return self.task.replica_loss(outputs, batch, normalizers, self.train_batch_size)

  def _tower_batches(self, batch, training: bool):
    """batch split into self.towers equal parts along the first axis of each of its tensors
    (per row, or per slot of packed rows, row-major, so the parts stay aligned): a list of one
    batch when there is one tower or, outside training, when a first axis is not a static
    multiple of the towers."""
    if self.towers == 1:
      return [batch]
    sizes = [value.shape[0] if value.shape.rank else None for value in batch.values()]
    if any(size is None or size % self.towers for size in sizes):
      if not training:
        return [batch]
      known = sorted({size for size in sizes if size is not None})
      size = (f"first axes of {', '.join(map(str, known))}" if None not in sizes
              else "a number of rows that changes from step to step")
      raise TrainingError(
          f"--cpu_towers={self.towers} splits each replica's training batch into that many "
          f"equal towers, but its batches have {size} (exact packed rows change it: use "
          "--packing=static or none)")
    return [{key: value[i * value.shape[0] // self.towers:
                        (i + 1) * value.shape[0] // self.towers]
             for key, value in batch.items()} for i in range(self.towers)]

  def _tower_loss(self, batch, normalizers):
    """The loss and sums of replica_loss, added up over the towers of batch."""
    results = [self.replica_loss(part, normalizers)
               for part in self._tower_batches(batch, training=True)]
    if len(results) == 1:
      return results[0]
    loss = tf.add_n([result[0] for result in results])
    return loss, {k: tf.add_n([result[1][k] for result in results]) for k in results[0][1]}

  def _gradients(self, batch, normalizers):
    variables = self.step_model.trainable_variables
    with tf.GradientTape() as tape:
      loss, sums = self._tower_loss(batch, normalizers)
      scaled = self.optimizer.scale_loss(loss) if self.loss_scaled else loss
    grads = tape.gradient(scaled, variables)
    # Embedding gradients come as IndexedSlices; accumulation needs dense tensors anyway.
    return loss, sums, [tf.convert_to_tensor(g) for g in grads]

  def _global_normalizers(self, batch):
    ctx = tf.distribute.get_replica_context()
    local = self.task.normalizers(batch)
    return {k: ctx.all_reduce(tf.distribute.ReduceOp.SUM, v) for k, v in local.items()}

  def _replica_step_fn(self, batch):
    """One optimizer update on this replica's share of the global batch."""
    normalizers = self._global_normalizers(batch)
    if self.accumulation == 1:
      loss, sums, grads = self._gradients(batch, normalizers)
    else:
      # batch holds [k, b, ...]: k micro-batches, gradients summed in-graph, clipped once below.
      def accumulate(i, loss, sums, grads):
        micro = {key: value[i] for key, value in batch.items()}
        micro_loss, micro_sums, micro_grads = self._gradients(micro, normalizers)
        return (i + 1, loss + micro_loss, {k: sums[k] + micro_sums[k] for k in sums},
                [a + tf.cast(g, a.dtype) for a, g in zip(grads, micro_grads)])
      start = (tf.constant(0), tf.constant(0.0),
               {k: tf.constant(0.0) for k in self.task.sum_names},
               [tf.zeros(v.shape, v.dtype) for v in self.step_model.trainable_variables])
      _, loss, sums, grads = tf.while_loop(
          lambda i, *_: i < self.accumulation, accumulate, start,
          maximum_iterations=self.accumulation)
    scale = self.optimizer.dynamic_scale if self.loss_scaled else None
    grads, grad_norm = optimization.clip_by_global_norm(grads, self.clip_norm, loss_scale=scale)
    self.optimizer.apply(grads, self.step_model.trainable_variables)
    sums = {k: sums[k] for k in self.task.sum_names}
    sums["loss"] = loss
    # Non-finite gradients with a finite loss would poison the weights just the same; with
    # float16 they are the loss scaler's business (it skips the step).
    sums["bad_gradients"] = (tf.zeros([]) if self.loss_scaled else
                             tf.cast(tf.logical_not(tf.math.is_finite(grad_norm)), tf.float32))
    return sums

  def _train_loop_fn(self, iterator, num_steps):
    """Runs up to num_steps updates; stops early on non-finite steps (see max_nonfinite_steps).

    Returns:
      (steps run, the number of consecutive non-finite losses at the end, summed metrics).
    """
    def step(steps, bad, totals):
      per_replica = self.strategy.run(self._replica_step, args=(next(iterator),))
      step_sums = {k: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
                   for k, v in per_replica.items()}
      finite = tf.math.is_finite(step_sums["loss"]) & (step_sums["bad_gradients"] == 0.0)
      # Non-finite losses would poison the logged mean; they are counted instead.
      step_sums["loss"] = tf.where(finite, step_sums["loss"], 0.0)
      return (steps + 1, tf.where(finite, 0, bad + 1),
              {k: totals[k] + step_sums[k] for k in totals})

    def more(steps, bad, totals):
      del totals
      return (steps < num_steps) & (bad < self.max_nonfinite_steps)

    start = (tf.constant(0), tf.constant(0),
             {k: tf.constant(0.0) for k in ("loss",) + tuple(self.task.sum_names)})
    return tf.while_loop(more, step, start, maximum_iterations=num_steps)

  def _eval_step_fn(self, iterator):
    def replica_eval(batch):
      towers = [self.task.eval_sums(self.model(self.task.model_inputs(part), training=False),
                                    part)
                for part in self._tower_batches(batch, training=False)]
      return {k: tf.add_n([sums[k] for sums in towers]) for k in towers[0]}
    per_replica = self.strategy.run(replica_eval, args=(next(iterator),))
    return {k: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
            for k, v in per_replica.items()}


  def _predict_step_fn(self, iterator, keep, sequence_length=None):
    """The model's outputs on one global batch, plus the batch's `keep` entries, gathered from
    every replica (and worker) along the batch axis.

    With sequence_length, per-position outputs of batches cut to a length bucket (axis 1 of
    unknown static size) are padded back to it with input_pipeline.PADDED_LOGIT (kept batch
    entries with 0), so batches of different lengths (and replicas with different lengths)
    concatenate.

    Packed rows (packed_rows.is_packed) with sequence_length: every output and kept entry
    of rank 2 or more is per position of the rows and comes back one row per slot
    (packed_rows.unpack_positions; past an example's end PADDED_LOGIT, kept entries 0), in
    the slot order of the per-example entries."""
    def replica_predict(batch):
      outputs = self.model(self.task.model_inputs(batch), training=False)
      kept = {key: batch[key] for key in keep}
      if sequence_length is not None and packed_rows.is_packed(batch):
        def unpack(values, pad):
          return {key: packed_rows.unpack_positions(value, batch, pad)
                  if value.shape.rank >= 2 else value for key, value in values.items()}
        outputs = unpack(outputs, input_pipeline.PADDED_LOGIT)
        kept = unpack(kept, 0)
      if sequence_length is not None:
        outputs = {key: _pad_positions(value, sequence_length, input_pipeline.PADDED_LOGIT)
                   for key, value in outputs.items()}
        kept = {key: _pad_positions(value, sequence_length, 0) for key, value in kept.items()}
      return dict(outputs, **kept)
    per_replica = self.strategy.run(replica_predict, args=(next(iterator),))
    return {k: self.strategy.gather(v, axis=0) for k, v in per_replica.items()}


def _pad_positions(value, sequence_length: int, pad_value):
  """value [B, S', ...] with S' unknown when traced -> [B, sequence_length, ...], the new
  positions holding pad_value; anything else unchanged."""
  if value.shape.rank is None or value.shape.rank < 2 or value.shape[1] is not None:
    return value
  missing = sequence_length - tf.shape(value)[1]
  paddings = [[0, 0], [0, missing]] + [[0, 0]] * (value.shape.rank - 2)
  padded = tf.pad(value, paddings, constant_values=tf.cast(pad_value, value.dtype))
  return tf.ensure_shape(padded, [None, sequence_length] + value.shape[2:].as_list())


def format_eta(seconds: float) -> str:
  seconds = int(max(0, seconds))
  return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Run(NamedTuple):
  """What a task's run trains: built under the strategy, restored from output_dir if possible.
  trainer.step_model is the model the step trains (`model` unless prepare_run had a
  step_model)."""
  model: keras.Model
  optimizer: keras.optimizers.Optimizer
  global_step: tf.Variable
  trainer: "Trainer"
  checkpoint: run_folder.CheckpointState


def prepare_run(strategy, build_model: Callable[[], keras.Model], task: Task, settings,
                num_train_steps: int, num_warmup_steps: int, chief: bool,
                towers: int = 1,
                step_model: Optional[Callable[[keras.Model], Any]] = None) -> Run:
  """Builds the model, the optimizer (with its schedule) and the step under the strategy, the
  Trainer, and the checkpoint, resuming from settings.output_dir when it holds one.

  `settings` needs the run fields every task shares: do_train (a run that does not train
  restores only the newest checkpoint), optimizer, adam_bias_correction, learning_rate,
  mixed_precision, train_batch_size, gradient_accumulation_steps, jit_compile,
  max_nonfinite_steps, output_dir, keep_checkpoint_max. towers: Trainer's (CPU towers).
  step_model: model -> (the model the training step runs, a trackable of the weights it adds
  or None), built under the strategy after the model (Trainer's step_model): the optimizer
  trains its variables, and the added weights are saved in the run's checkpoints beside the
  model (run_folder.checkpoint_state's `extra`), never in it.
  """
  with strategy.scope():
    model = build_model()
    stepped, extra = step_model(model) if step_model is not None else (model, None)
    optimizer = optimization.create_optimizer(
        settings.optimizer, settings.learning_rate, num_train_steps, num_warmup_steps,
        adam_bias_correction=settings.adam_bias_correction,
        loss_scale=settings.mixed_precision == "float16")
    optimizer.build(stepped.trainable_variables)
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                              aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
  trainer = Trainer(strategy, model, optimizer, task, settings.train_batch_size,
                    settings.gradient_accumulation_steps, settings.jit_compile,
                    settings.max_nonfinite_steps, towers=towers, step_model=stepped)
  state = run_folder.checkpoint_state(model, optimizer, global_step, settings.output_dir,
                                      chief, strategy, settings.keep_checkpoint_max,
                                      newest_only=not settings.do_train, extra=extra)
  return Run(model, optimizer, global_step, trainer, state)


class _TrainingRun:
  """What the parts of one train() call share: the step reached, the training clock (without
  evaluations), the non-finite steps in a row across calls, and the last logged metrics.

  train() keeps the order of things (calls, log line, checkpoint, evaluation, stop); this
  class does each of them.
  """

  def __init__(self, trainer: Trainer, iterator, global_step: tf.Variable, manager,
               num_train_steps: int, iterations_per_loop: int, save_checkpoints_steps: int,
               on_checkpoint: Optional[Callable[[int], None]], eval_every_n_steps: int,
               on_eval: Optional[Callable[[int], Any]]):
    self.trainer, self.iterator = trainer, iterator
    self.global_step, self.manager = global_step, manager
    self.num_train_steps = num_train_steps
    self.iterations_per_loop = iterations_per_loop
    self.save_checkpoints_steps = save_checkpoints_steps
    self.on_checkpoint = on_checkpoint
    self.eval_every_n_steps = eval_every_n_steps if on_eval is not None else 0
    self.on_eval = on_eval
    self.budget = stopping.stop_check_seconds()
    self.agree = stopping.agreement(trainer.strategy)
    self.start_step = self.step = int(global_step.numpy())
    self.start_time = self.last_line = time.time()
    self.seconds_per_step: Optional[float] = None
    self.eval_seconds, self.evals = 0.0, 0
    self.bad = 0  # non-finite steps in a row (Trainer.train_loop counts within one call)
    self.last: Dict[str, float] = {}

  def interval(self) -> int:
    """Steps to the next log line, checkpoint, evaluation or the end, whichever comes first."""
    every = self.save_checkpoints_steps
    steps = min(self.iterations_per_loop, self.num_train_steps - self.step,
                (self.step // every + 1) * every - self.step)
    if self.eval_every_n_steps > 0:
      every = self.eval_every_n_steps
      steps = min(steps, (self.step // every + 1) * every - self.step)
    return steps

  def run_interval(self, interval: int, stop: stopping.StopRequest):
    """Calls the step until `interval` steps ran or the workers agree to stop.

    Returns:
      (steps done, their seconds, their summed metrics or None, whether to stop).
    """
    done, elapsed, totals = 0, 0.0, None
    while done < interval:
      stop_now, steps = self.agree(stop.requested,
                                   stopping.call_steps(self.seconds_per_step, self.budget))
      if stop_now:
        return done, elapsed, totals, True
      steps_run, call_time, call_totals = self._call(min(steps, interval - done))
      elapsed += call_time
      done += steps_run
      totals = call_totals if totals is None else {k: totals[k] + call_totals[k]
                                                   for k in totals}
      if done < interval and time.time() - self.last_line >= stopping.PROGRESS_SECONDS:
        # A long interval (--iterations_per_loop) shows its progress so far on the way.
        self.progress(totals, done, elapsed)
    return done, elapsed, totals, False

  def _call(self, num_steps: int):
    """One call of the step: (steps run, seconds, summed metrics); TrainingError at the
    limit of non-finite steps in a row."""
    if self.bad:
      # A run of non-finite steps that goes on in this call ends it at the limit exactly.
      num_steps = min(num_steps, self.trainer.max_nonfinite_steps - self.bad)
    call_start = time.time()
    steps_run, call_bad, call_totals = self.trainer.train_loop(self.iterator,
                                                               tf.constant(num_steps))
    steps_run, call_bad = int(steps_run), int(call_bad)
    call_time = time.time() - call_start
    self.seconds_per_step = call_time / max(steps_run, 1)
    self.global_step.assign_add(steps_run)
    self.step = int(self.global_step.numpy())
    self.bad = self.bad + call_bad if call_bad == steps_run else call_bad
    if self.bad >= self.trainer.max_nonfinite_steps:
      raise TrainingError(
          f"non-finite loss at step {self.step} ({self.bad} in a row); the last good "
          f"checkpoint is {self.manager.latest_checkpoint or 'none (no checkpoint was written)'}"
          ". Lower --learning_rate, check the data, or use --mixed_precision=float16 loss "
          "scaling")
    return steps_run, call_time, {k: float(v) for k, v in call_totals.items()}

  def progress(self, totals, done: int, elapsed: float) -> Dict[str, float]:
    """Logs a progress line for the steps `done` so far in this interval; their metrics."""
    metrics = self.trainer.task.train_metrics(totals, max(1, done - min(self.bad, done)))
    metrics["learning_rate"] = float(self.trainer.optimizer.learning_rate)
    metrics["examples_per_second"] = totals["examples"] / max(elapsed, 1e-9)
    # Evaluations are off the training clock; the ETA adds the ones still to come.
    eta = ((time.time() - self.start_time - self.eval_seconds)
           / max(self.step - self.start_step, 1) * (self.num_train_steps - self.step))
    if self.eval_every_n_steps > 0 and self.evals:
      every = self.eval_every_n_steps
      eta += ((self.num_train_steps // every - self.step // every)
              * (self.eval_seconds / self.evals))
    shown = " ".join(f"{k} = {v:.4f}" for k, v in metrics.items()
                     if k not in ("learning_rate", "examples_per_second"))
    logging.info("step %d/%d %s learning_rate = %.3g examples/s = %.1f ETA %s", self.step,
                 self.num_train_steps, shown, metrics["learning_rate"],
                 metrics["examples_per_second"], format_eta(eta))
    self.last_line = time.time()
    return metrics

  def record(self, totals, done: int, elapsed: float, writer) -> None:
    """The interval's log line and summaries; its metrics become the ones train() returns."""
    metrics = self.progress(totals, done, elapsed)
    with writer.as_default():
      for key, value in metrics.items():
        tf.summary.scalar(key, value, step=self.step)
    self.last = {(k if k in ("learning_rate", "examples_per_second") else "train_" + k): v
                 for k, v in metrics.items()}

  def checkpoint_and_evaluate(self) -> None:
    """Saves at a multiple of save_checkpoints_steps and at the end, then evaluates at a
    multiple of eval_every_n_steps, off the training clock."""
    if self.step % self.save_checkpoints_steps == 0 or self.step >= self.num_train_steps:
      path = self.manager.save(checkpoint_number=self.step)
      logging.info("Saved checkpoint %s", path)
      if self.on_checkpoint is not None and self.step < self.num_train_steps:
        self.on_checkpoint(self.step)
    if self.eval_every_n_steps > 0 and self.step % self.eval_every_n_steps == 0:
      eval_start = time.time()
      self.on_eval(self.step)
      self.eval_seconds += time.time() - eval_start
      self.evals += 1


def train(trainer: Trainer, iterator, global_step: tf.Variable, manager,
          num_train_steps: int, iterations_per_loop: int, save_checkpoints_steps: int,
          summary_dir: Optional[str], chief: bool,
          on_checkpoint: Optional[Callable[[int], None]] = None,
          eval_every_n_steps: int = 0,
          on_eval: Optional[Callable[[int], Any]] = None) -> Dict[str, float]:
  """Trains from global_step to num_train_steps, logging, summarising and checkpointing.

  Size: twelve parameters, as the loop's one entry point, shared by pretraining and
  fine-tuning: the trainer, the data, the step counter, the checkpoint manager and the run's
  schedule flags come in. train() keeps the order of things and the preemption and lost-worker
  handling; _TrainingRun does each part (the calls of the step with the non-finite check, the
  log lines, checkpoints and evaluations).

  Metrics are logged and summarised every iterations_per_loop steps (and at each checkpoint);
  a call of the step runs at most that many, fewer when they would take longer than
  stopping.stop_check_seconds(), so that a SIGTERM is seen soon: training then stops at the end of
  the current call (every worker after the same step), saves a checkpoint of the step reached
  and raises Preempted (exit status stopping.EXIT_PREEMPTED); the same command resumes from it.

  Args:
    trainer: the distributed steps.
    iterator: an iterator (data_iterator) positioned at global_step (resume-by-skip: the caller
      skips the batches already used).
    global_step: the step variable (saved in the checkpoint).
    manager: the checkpoint manager.
    num_train_steps, iterations_per_loop, save_checkpoints_steps: the schedule.
    summary_dir: where the chief writes TensorBoard summaries (None: none).
    chief: whether this process writes summaries.
    on_checkpoint: called with the step after each checkpoint before the last one.
    eval_every_n_steps, on_eval: on_eval(step) is called at every multiple of
      eval_every_n_steps (the last step included; steps per call end there), after that
      step's log line and checkpoint; its time is kept off the training clock (examples/s
      and the ETA's seconds per step).

  Returns:
    The last logged metrics, each prefixed "train_", plus learning_rate and
    examples_per_second.

  Raises:
    TrainingError: non-finite losses (naming the last good checkpoint).
    Preempted: a SIGTERM came (after the checkpoint of the step reached was saved).
    WorkerLost: another worker of a multi-worker run was lost (one line said which).
  """
  writer = (tf.summary.create_file_writer(summary_dir) if chief and summary_dir
            else tf.summary.create_noop_writer())
  run = _TrainingRun(trainer, iterator, global_step, manager, num_train_steps,
                     iterations_per_loop, save_checkpoints_steps, on_checkpoint,
                     eval_every_n_steps, on_eval)
  stop_now = False
  stop = stopping.StopRequest()
  with stop.installed(), stopping.worker_loss(trainer.strategy, manager, chief,
                                              num_train_steps, lambda: run.step):
    while run.step < num_train_steps:
      done, elapsed, totals, stop_now = run.run_interval(run.interval(), stop)
      if done:
        run.record(totals, done, elapsed, writer)
      if stop_now:
        break
      run.checkpoint_and_evaluate()
    if not stop_now:
      # A signal during the last call (every worker takes part, signalled or not): the run
      # stops before evaluating and exporting, its final checkpoint being the step reached.
      stop_now, _ = run.agree(stop.requested, 1)
  writer.flush()
  preempted = (stopping.stop_and_save(manager, run.step, num_train_steps, chief,
                                      stop.signalled_at) if stop_now else None)
  if not chief:
    io.remove(manager.directory)
  if preempted is not None:
    if isinstance(trainer.strategy, tf.distribute.MultiWorkerMirroredStrategy):
      from bert_tf.training import cluster  # pylint: disable=g-import-not-at-top
      cluster.finishing(stopping.EXIT_PREEMPTED)  # the tasks leave together, quietly
    raise preempted
  return run.last


# === Weights from init_checkpoint ===


def load_init_checkpoint(model, path: str, init_layers: Optional[str] = None) -> Set[str]:
  """Loads weights only (no optimizer state, no step) into `model` (checkpoints.load_weights).

  Args:
    model: the task's model.
    path: any checkpoint checkpoints.read_weights reads (a run directory for its latest).
    init_layers: --init_layers: which encoder layers of a checkpoint deeper than the model it
      takes (layer_selection; None: evenly spaced).

  Returns:
    The paths of the model variables that were restored.

  Raises:
    TrainingError: unreadable, of another shape, or sharing no variable with the model.
  """
  try:
    layer_selection.parse_init_layers(init_layers)
  except ValueError as e:
    raise TrainingError(str(e)) from None
  try:
    report = layer_selection.load_selected_layers(model, path, init_layers)
    if report is None:
      report = checkpoints.load_weights(model, path, strict=False)
  except layer_selection.InitLayersError as e:
    raise TrainingError(str(e)) from None
  except (FileNotFoundError, ValueError, KeyError, IndexError, tf.errors.OpError) as e:
    # OpError: TensorFlow's reader on a file that is not a checkpoint (DataLossError);
    # IndexError: a truncated checkpoint ("Read less bytes than requested").
    reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise TrainingError(f"--init_checkpoint={path}: cannot read it as a checkpoint "
                        f"({reason})") from None
  if report.mismatched:
    raise TrainingError(f"--init_checkpoint={path}: shapes differ from the model built from "
                        f"--bert_config_file: {report.mismatch_summary()}")
  loaded = set(report.loaded)
  restored = {v.path for v in model.weights if checkpoints.original_name(v.path)[0] in loaded}
  if not restored:
    raise TrainingError(f"--init_checkpoint={path}: no variable of the model was found in it")
  return restored


def log_variables(model, restored: Set[str] = frozenset()) -> None:
  """Logs every trainable variable, marking those from init_checkpoint (as the original)."""
  logging.info("**** Trainable Variables ****")
  for variable in model.trainable_variables:
    mark = ", *INIT_FROM_CKPT*" if variable.path in restored else ""
    logging.info("  name = %s, shape = %s%s", variable.path, tuple(variable.shape), mark)

