"""The task-agnostic training loop: strategies, distributed steps, checkpoints, summaries.

One custom loop serves every tf.distribute strategy (one device, several GPUs, several workers,
TPUs): a `tf.function` runs up to `iterations_per_loop` steps per call (what TPUs need to keep
the host out of the way) and every step goes through `strategy.run`. There is no TPU-specific
branch in the step or the model.

What is specific to a task (pretraining, classification, SQuAD, tagging) comes in a `Task`: a
small named tuple of plain functions for its model inputs, its loss and its metric sums. The
loop owns everything else: gradient accumulation, clipping, the non-finite guard, checkpoints
and resume-by-skip, logging with rate and ETA, summaries and eval aggregation.

Batch sizes are global: `train_batch_size` examples go into every optimizer update, split over
the replicas and, with gradient accumulation, over micro-batches per replica. A task's loss is
written for the whole global batch: `normalizers` sums what its denominators need over every
replica and micro-batch, so one device, many devices and accumulation give the same update up
to float rounding.
"""

import contextlib
import json
import os
import re
import select
import signal
import socket
import threading
import time
from typing import (Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Set,
                    Tuple)

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf.model import checkpoints
from bert_tf.model import layers
from bert_tf.training import input_pipeline
from bert_tf.training import optimization

STRATEGY_NAMES = ("tpu", "mirrored", "multi_worker_mirrored", "one_device")
MIXED_PRECISION_POLICIES = {"none": "float32", "bfloat16": "mixed_bfloat16",
                            "float16": "mixed_float16"}
EVAL_RESULTS_FILE = "eval_results.txt"

Tensors = Mapping[str, tf.Tensor]


class TrainingError(ValueError):
  """A run that cannot start or go on; the message says why and what to do."""


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


# === Strategy ===


def _num_workers_in_tf_config() -> int:
  try:
    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
  except json.JSONDecodeError as e:
    raise TrainingError(f"the TF_CONFIG environment variable is not valid JSON: {e}") from None
  return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def select_strategy(strategy_name: Optional[str] = None, use_tpu: bool = False,
                    tpu_name: Optional[str] = None, tpu_zone: Optional[str] = None,
                    gcp_project: Optional[str] = None, master: Optional[str] = None,
                    num_tpu_cores: int = 8) -> tf.distribute.Strategy:
  """The tf.distribute strategy to train with.

  Without a name it is chosen from the original's flags and the machine: use_tpu -> tpu;
  TF_CONFIG naming several workers -> multi_worker_mirrored; several GPUs -> mirrored;
  otherwise one_device. "mirrored" on a machine without GPUs mirrors over the logical CPU
  devices (several only if configured with tf.config.set_logical_device_configuration).

  Args:
    strategy_name: one of STRATEGY_NAMES, or None to choose as above.
    use_tpu, tpu_name, tpu_zone, gcp_project, master: the original's TPU flags; the TPU
      address is tpu_name, else master.
    num_tpu_cores: checked against the TPU found (the strategy uses all its cores).

  Returns:
    A tf.distribute.Strategy.

  Raises:
    TrainingError: an unknown name, or a TPU that cannot be reached.
  """
  if strategy_name is None:
    if use_tpu:
      strategy_name = "tpu"
    elif _num_workers_in_tf_config() > 1:
      strategy_name = "multi_worker_mirrored"
    elif len(tf.config.list_logical_devices("GPU")) > 1:
      strategy_name = "mirrored"
    else:
      strategy_name = "one_device"
  if strategy_name not in STRATEGY_NAMES:
    raise TrainingError(f"--strategy must be one of {', '.join(STRATEGY_NAMES)}, got "
                        f"{strategy_name!r}")
  if strategy_name == "tpu":
    address = tpu_name or master
    try:
      resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
          tpu=address, zone=tpu_zone, project=gcp_project)
      tf.config.experimental_connect_to_cluster(resolver)
      tf.tpu.experimental.initialize_tpu_system(resolver)
      strategy = tf.distribute.TPUStrategy(resolver)
    except Exception as e:  # pylint: disable=broad-except
      # The resolver raises several unrelated types (ValueError, RuntimeError, NotFoundError).
      raise TrainingError(
          f"--use_tpu/--strategy=tpu: cannot reach a TPU (tpu_name={tpu_name!r}, "
          f"master={master!r}, tpu_zone={tpu_zone!r}, gcp_project={gcp_project!r}): "
          f"{type(e).__name__}: {e}") from None
    if strategy.num_replicas_in_sync != num_tpu_cores:
      logging.warning("The TPU has %d cores; --num_tpu_cores=%d is ignored (all are used)",
                      strategy.num_replicas_in_sync, num_tpu_cores)
    return strategy
  if strategy_name == "multi_worker_mirrored":
    # A bounded wait for the other tasks, which SIGTERM stops (see training/cluster.py).
    from bert_tf.training import cluster  # pylint: disable=g-import-not-at-top
    return cluster.create_multi_worker_strategy(tf.distribute.MultiWorkerMirroredStrategy)
  gpus = tf.config.list_logical_devices("GPU")
  if strategy_name == "mirrored":
    devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
    return tf.distribute.MirroredStrategy(devices=devices)
  return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
  """Whether this process writes checkpoints, summaries and results (task 0 / the chief)."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return True
  task_type, task_id = resolver.task_type, resolver.task_id
  return task_type in (None, "chief") or (task_type == "worker" and task_id == 0 and
                                          "chief" not in resolver.cluster_spec().as_dict())


def use_cpu_towers(towers: int) -> bool:
  """TensorFlow's threads for Trainer's towers on a CPU: one intra-op thread (each op on one
  core) and `towers` inter-op threads (the towers side by side). Must run before TensorFlow
  executes anything; returns False, with a warning, when it is too late (the towers then run
  on the threads TensorFlow already has: the same update, without the speed-up)."""
  if towers <= 1:
    return True
  try:
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(towers)
  except RuntimeError as e:
    logging.warning("--cpu_towers=%d: TensorFlow's threads are already set up (%s); the "
                    "towers run on its %d intra-op and %d inter-op threads", towers, e,
                    tf.config.threading.get_intra_op_parallelism_threads(),
                    tf.config.threading.get_inter_op_parallelism_threads())
    return False
  return True


def check_cpu_only(strategy, towers: int) -> None:
  """TrainingError when towers > 1 would run on GPUs or TPUs (towers are for CPUs: an
  accelerator's ops already keep it busy)."""
  if towers <= 1:
    return
  devices = [d for d in strategy.extended.worker_devices
             if tf.DeviceSpec.from_string(d).device_type not in (None, "CPU")]
  if devices:
    raise TrainingError(f"--cpu_towers={towers} is for training on CPUs; this run's strategy "
                        f"places replicas on {', '.join(devices)}: leave it at 1")


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
    towers: each replica's (micro-)batch is split along its first axis into this many towers,
      computed as independent branches of one graph and summed: the same update (the loss
      is normalized over the global batch either way), for CPUs, where towers of one-thread
      ops keep the cores busier than ops that each split their work over the cores
      (use_cpu_towers). Training batches must have a static first axis divisible by it;
      evaluation batches that do not are computed as one tower.
  """

  def __init__(self, strategy, model, optimizer, task: Task, train_batch_size: int,
               gradient_accumulation_steps: int = 1, jit_compile: bool = False,
               max_nonfinite_steps: int = 5, clip_norm: float = 1.0, towers: int = 1):
    self.strategy = strategy
    self.model = model
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
    outputs = self.model(self.task.model_inputs(batch), training=training)
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
    variables = self.model.trainable_variables
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
               [tf.zeros(v.shape, v.dtype) for v in self.model.trainable_variables])
      _, loss, sums, grads = tf.while_loop(
          lambda i, *_: i < self.accumulation, accumulate, start,
          maximum_iterations=self.accumulation)
    scale = self.optimizer.dynamic_scale if self.loss_scaled else None
    grads, grad_norm = optimization.clip_by_global_norm(grads, self.clip_norm, loss_scale=scale)
    self.optimizer.apply(grads, self.model.trainable_variables)
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

    Packed rows (input_pipeline.is_packed) with sequence_length: every output and kept entry
    of rank 2 or more is per position of the rows and comes back one row per slot
    (input_pipeline.unpack_positions; past an example's end PADDED_LOGIT, kept entries 0), in
    the slot order of the per-example entries."""
    def replica_predict(batch):
      outputs = self.model(self.task.model_inputs(batch), training=False)
      kept = {key: batch[key] for key in keep}
      if sequence_length is not None and input_pipeline.is_packed(batch):
        def unpack(values, pad):
          return {key: input_pipeline.unpack_positions(value, batch, pad)
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


# === The run around the steps ===


def format_eta(seconds: float) -> str:
  seconds = int(max(0, seconds))
  return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class CheckpointState(NamedTuple):
  """A run's checkpoint, its manager and whether it resumed."""
  checkpoint: tf.train.Checkpoint
  manager: tf.train.CheckpointManager
  resumed_from: Optional[str]


def checkpoint_state(model, optimizer, global_step, output_dir: str, chief: bool,
                     strategy, keep_checkpoint_max: int = 5,
                     newest_only: bool = False) -> CheckpointState:
  """Builds the run's checkpoint and restores the latest one in output_dir, if any (with
  newest_only, only the newest: see restore_newest_valid_checkpoint).

  The model's layers are tracked by name (checkpoints.checkpointable), so export, serving and
  fine-tuning can restore these weights into any graph with the same layers. Non-chief workers
  must take part in saving (collectives) but write to a scratch directory.
  """
  parts = dict(model=checkpoints.checkpointable(model), optimizer=optimizer, step=global_step)
  seeds = checkpoints.dropout_seed_states(model)
  # Checkpoints written before the dropout seeds were saved restore through `without_seeds`.
  without_seeds = tf.train.Checkpoint(**parts) if seeds is not None else None
  if seeds is not None:
    parts[checkpoints.DROPOUT_SEEDS] = seeds
  checkpoint = tf.train.Checkpoint(**parts)
  checkpoint_dir = output_dir
  if not chief:
    checkpoint_dir = os.path.join(output_dir, f".worker_{strategy.cluster_resolver.task_id}_tmp")
  manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=keep_checkpoint_max)
  latest = restore_newest_valid_checkpoint(checkpoint, output_dir, without_seeds, newest_only)
  return CheckpointState(checkpoint, manager, latest)


def _has_dropout_seeds(path: str) -> bool:
  prefix = checkpoints.DROPOUT_SEEDS + "/"
  return any(name.startswith(prefix) for name, _ in tf.train.list_variables(path))


def remove_failed_run_files(output_dir: str, before: Set[str]) -> None:
  """After a run failed: when output_dir holds no checkpoint, removes what the run wrote there
  (every name not in `before`, the lock's files excepted), so that a failed run leaves the
  folder as it was."""
  if not io.isdir(output_dir) or run_checkpoints(output_dir):
    return
  created = sorted(name for name in set(io.listdir(output_dir)) - before
                   if not name.startswith(io.LOCK_NAME))  # the lock and its heartbeat's
  for name in created:
    io.remove(io.join(output_dir, name))
  if created:
    logging.info("The run failed before its first checkpoint: removed what it wrote to %s (%s)",
                 output_dir, ", ".join(created))


def remove_if_empty(folder: str) -> None:
  """Removes a folder that holds nothing (one a failed run made and left empty)."""
  if io.isdir(folder) and not io.listdir(folder):
    io.remove(folder)


def _checkpoint_step(path: str) -> int:
  match = re.search(r"-(\d+)$", path)
  return int(match.group(1)) if match else -1


def run_checkpoints(output_dir: str) -> List[str]:
  """The run's checkpoint prefixes, newest (highest number) first: those the `checkpoint` state
  file lists and every `ckpt-N.index` in output_dir (the state file may be stale or gone)."""
  found = set()
  try:
    state = tf.train.get_checkpoint_state(output_dir)
  except (tf.errors.OpError, ValueError) as e:  # a corrupt state file: the glob still finds them
    logging.warning("Cannot read %s (%s); looking for checkpoints by name",
                    io.join(output_dir, "checkpoint"), e)
    state = None
  if state is not None:
    found.update(state.all_model_checkpoint_paths)
    if state.model_checkpoint_path:
      found.add(state.model_checkpoint_path)
  found.update(path[:-len(".index")] for path in io.glob(io.join(output_dir, "ckpt-*.index")))
  return sorted(found, key=lambda p: (_checkpoint_step(p), p), reverse=True)


def restore_newest_valid_checkpoint(checkpoint: tf.train.Checkpoint, output_dir: str,
                                    without_seeds: Optional[tf.train.Checkpoint] = None,
                                    newest_only: bool = False) -> Optional[str]:
  """Restores the newest checkpoint of output_dir that reads completely; returns its prefix.

  A listed checkpoint whose files are gone, or one that fails to read (truncated, corrupt), is
  named in a warning and the next older one is tried, so a run resumes from its newest valid
  state instead of silently starting again from step 0 and saving over the older checkpoints.
  `without_seeds` (the same objects without the dropout seed states) restores checkpoints
  written before those were saved, with a warning that the masks will differ.

  A run that does not train (newest_only: evaluation, prediction) must not fall back: its
  results would describe an older model than the newest checkpoint, without saying so.

  Returns:
    The restored prefix, or None when output_dir holds no checkpoint at all.

  Raises:
    TrainingError: output_dir has checkpoints but none of them can be restored; or, with
      newest_only, the newest cannot (naming it and the older one it would have used).
  """
  candidates = run_checkpoints(output_dir)
  problems = []
  for path in candidates:
    if not io.exists(path + ".index"):
      problems.append(f"{path}: its files are missing")
      logging.warning("Checkpoint %s is listed but its files are missing; trying an older one",
                      path)
      continue
    try:
      if without_seeds is not None and not _has_dropout_seeds(path):
        without_seeds.restore(path).assert_existing_objects_matched()
        logging.warning("%s holds no dropout RNG state (written by an older bert_tf): the "
                        "resumed run draws other dropout masks than an uninterrupted run "
                        "would have", path)
      else:
        checkpoint.restore(path).assert_existing_objects_matched()
    except (tf.errors.OpError, ValueError, IndexError, AssertionError) as e:
      reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      problems.append(f"{path}: {reason}")
      logging.warning("Checkpoint %s cannot be restored (%s); trying an older one", path, reason)
      continue
    if problems and newest_only:
      raise TrainingError(
          f"the newest checkpoint in {output_dir} cannot be restored ({'; '.join(problems)}); "
          f"this run does not train, so it would evaluate or predict with an older one ({path})"
          " without saying so. Restore or remove the damaged checkpoint's files, or train again "
          "to write it anew")
    if problems:
      logging.warning("Resuming from %s, the newest valid checkpoint (skipped: %s)", path,
                      "; ".join(problems))
    logging.info("Resuming from %s", path)
    return path
  if candidates:
    raise TrainingError(
        f"{output_dir} holds checkpoints but none can be restored ({'; '.join(problems)}); "
        "refusing to start again from step 0 over them: move them away or choose another "
        "--output_dir")
  return None


RUN_SETTINGS_FILE = "run_settings.json"
# The flags whose change moves a resumed run's data position (resume skips global_step batches
# of the new size and length): a resume that changes one is refused.
POSITION_FLAGS = ("train_batch_size", "max_seq_length", "max_predictions_per_seq")
# Flags recorded too, whose change on resume is allowed but warned about: the resumed run then
# differs from an uninterrupted one (another data order, schedule or data).
TRAJECTORY_FLAGS = ("seed", "learning_rate", "num_train_steps", "num_train_epochs",
                    "num_warmup_steps", "warmup_proportion", "optimizer", "adam_bias_correction",
                    "gradient_accumulation_steps", "input_file", "train_file", "data_dir",
                    "init_checkpoint", "packing")


def run_directory_lock(output_dir: str, chief: bool, program: str):
  """The chief's lock on a run directory (io.directory_lock); other workers, which write to
  scratch directories of their own, take none."""
  return io.directory_lock(output_dir, program) if chief else contextlib.nullcontext()


def check_resume_compatible(output_dir: str, config, settings) -> None:
  """Refuses to resume the checkpoints in output_dir with another config or data position.

  Called before anything is written to output_dir, so a refused resume leaves the run as it
  was. Compares with the bert_config.json and run_settings.json that record_run wrote there.

  Raises:
    TrainingError: naming the config file or the flag that differs.
  """
  if not run_checkpoints(output_dir):
    return
  config_path = io.join(output_dir, "bert_config.json")
  if io.exists(config_path):
    recorded = json.loads(io.read_text(config_path))
    current = config.to_dict()
    changed = [f"{key} {recorded.get(key)!r} -> {current.get(key)!r}"
               for key in sorted(set(recorded) | set(current))
               if recorded.get(key) != current.get(key)]
    if changed:
      raise TrainingError(
          f"--bert_config_file differs from {config_path}, the config of the checkpoints in "
          f"--output_dir ({'; '.join(changed)}); resume with that config or choose another "
          "--output_dir")
  settings_path = io.join(output_dir, RUN_SETTINGS_FILE)
  # Evaluating or predicting with the checkpoints at another length or batch size is fine.
  if getattr(settings, "do_train", False) and io.exists(settings_path):
    recorded = json.loads(io.read_text(settings_path))
    for key in POSITION_FLAGS:
      if key in recorded and hasattr(settings, key) and recorded[key] != getattr(settings, key):
        raise TrainingError(
            f"--{key}={getattr(settings, key)} but the checkpoints in {output_dir} were trained "
            f"with --{key}={recorded[key]}: resuming would not continue where the run stopped "
            f"in the data; resume with --{key}={recorded[key]} or choose another --output_dir")
    changed = [f"--{key} {recorded[key]!r} -> {getattr(settings, key)!r}"
               for key in TRAJECTORY_FLAGS
               if key in recorded and hasattr(settings, key)
               and recorded[key] != getattr(settings, key)]
    if changed:
      logging.warning("Resuming the checkpoints in %s with changed flags (%s): the run goes "
                      "on, but it will not equal an uninterrupted run with the recorded flags "
                      "(%s)", output_dir, "; ".join(changed), settings_path)


def record_run(output_dir: str, config, settings) -> None:
  """Writes bert_config.json and, for a training run, run_settings.json (the data-position
  flags, refused when changed on resume, and TRAJECTORY_FLAGS, warned about) to output_dir."""
  config.to_json_file(io.join(output_dir, "bert_config.json"))
  if not getattr(settings, "do_train", False):
    return
  recorded = {key: getattr(settings, key) for key in POSITION_FLAGS + TRAJECTORY_FLAGS
              if hasattr(settings, key)}
  io.write_text(io.join(output_dir, RUN_SETTINGS_FILE),
                json.dumps(recorded, indent=2, sort_keys=True) + "\n")


class Run(NamedTuple):
  """What a task's run trains: built under the strategy, restored from output_dir if possible."""
  model: keras.Model
  optimizer: keras.optimizers.Optimizer
  global_step: tf.Variable
  trainer: "Trainer"
  checkpoint: CheckpointState


def prepare_run(strategy, build_model: Callable[[], keras.Model], task: Task, settings,
                num_train_steps: int, num_warmup_steps: int, chief: bool,
                towers: int = 1) -> Run:
  """Builds the model, the optimizer (with its schedule) and the step under the strategy, the
  Trainer, and the checkpoint, resuming from settings.output_dir when it holds one.

  `settings` needs the run fields every task shares: do_train (a run that does not train
  restores only the newest checkpoint), optimizer, adam_bias_correction, learning_rate,
  mixed_precision, train_batch_size, gradient_accumulation_steps, jit_compile,
  max_nonfinite_steps, output_dir, keep_checkpoint_max. towers: Trainer's (CPU towers).
  """
  with strategy.scope():
    model = build_model()
    optimizer = optimization.create_optimizer(
        settings.optimizer, settings.learning_rate, num_train_steps, num_warmup_steps,
        adam_bias_correction=settings.adam_bias_correction,
        loss_scale=settings.mixed_precision == "float16")
    optimizer.build(model.trainable_variables)
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                              aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
  trainer = Trainer(strategy, model, optimizer, task, settings.train_batch_size,
                    settings.gradient_accumulation_steps, settings.jit_compile,
                    settings.max_nonfinite_steps, towers=towers)
  state = checkpoint_state(model, optimizer, global_step, settings.output_dir, chief, strategy,
                           settings.keep_checkpoint_max, newest_only=not settings.do_train)
  return Run(model, optimizer, global_step, trainer, state)


def resumed_iterator(strategy, dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset],
                     global_step: tf.Variable):
  """An iterator (data_iterator) over dataset_fn's batches, positioned at global_step
  (resume by skip).

  tf.distribute iterators cannot be checkpointed (TF 2.20), so the data position is the step: a
  resumed run skips the batches (updates) already used. With a seeded, deterministic dataset
  the resumed run sees exactly the batches an uninterrupted run would.

  Args:
    strategy: the run's strategy.
    dataset_fn: InputContext -> the per-replica dataset of one element per update.
    global_step: the restored step.
  """
  skip = int(global_step.numpy())

  def positioned(ctx):
    dataset = dataset_fn(ctx)
    return dataset.skip(skip) if skip else dataset

  return data_iterator(strategy, positioned)


def data_iterator(strategy, dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset]):
  """An iterator over dataset_fn's batches for the replicas of `strategy`: every training,
  eval and predict loop of the package reads its data through one.

  Both ways keep tf.data's autotuning model off in every dataset the iterator reads, because
  deleting an iterator with that model on can block for up to a minute in TensorFlow 2.20
  (input_pipeline._prefetched says why). The model is turned off here in whatever dataset_fn
  returns (the package's pipelines already have it off; a caller's own dataset may not), and:
  - A OneDeviceStrategy (one CPU or one GPU) gets the dataset's own iterator, made on the host
    CPU; the step copies each batch to the device, a few hundred kilobytes for BERT's int32
    features.
  - Other strategies get strategy.distribute_datasets_from_function's iterator. It wraps each
    device's share in a dataset of its own (a prefetch on the device), built with default
    options, which turn the model back on; TensorFlow has no option to reach them, so while
    the iterator is made its private helper multi_device_iterator_ops._create_device_dataset
    is wrapped to turn the model off in them (_device_datasets_without_autotuning).
  """
  def dataset_without_autotuning(ctx):
    return input_pipeline.autotuning_off(dataset_fn(ctx))

  if isinstance(strategy, tf.distribute.OneDeviceStrategy):
    with tf.device("/cpu:0"):
      return iter(dataset_without_autotuning(tf.distribute.InputContext()))
  with _device_datasets_without_autotuning():
    return iter(strategy.distribute_datasets_from_function(dataset_without_autotuning))


@contextlib.contextmanager
def _device_datasets_without_autotuning():
  """Within the block, the per-device datasets that tf.distribute's iterators make have
  tf.data's autotuning model off (see data_iterator). Without TensorFlow's helper (another
  version), the block changes nothing, and tests/training/test_loop.py fails, naming it."""
  # pylint: disable=g-import-not-at-top,protected-access
  from tensorflow.python.data.ops import multi_device_iterator_ops
  original = getattr(multi_device_iterator_ops, "_create_device_dataset", None)
  if original is None:
    yield
    return

  def create_device_dataset(*args, **kwargs):
    return input_pipeline.autotuning_off(original(*args, **kwargs))

  multi_device_iterator_ops._create_device_dataset = create_device_dataset
  try:
    yield
  finally:
    multi_device_iterator_ops._create_device_dataset = original


# === Stopping on SIGTERM (preemption) ===

# The exit status of a run that SIGTERM stopped after it saved a checkpoint at the step it had
# reached: EX_TEMPFAIL of sysexits.h ("a temporary failure; the user is invited to retry").
# Not 143 (128 + SIGTERM), which a process killed by SIGTERM before it could save reports too:
# a distinct status tells a cluster manager or a script that the run is whole and that running
# the same command again resumes it with no step lost.
EXIT_PREEMPTED = 75
# How long one call of the training step may run before the loop looks for a SIGTERM again
# (seconds, measured from the steps before): the bound between the signal and the save, plus
# one step and the save itself. TPU VMs, GCE and Kubernetes allow about 30 s by default.
STOP_CHECK_ENV = "BERT_TF_STOP_CHECK_SECONDS"
DEFAULT_STOP_CHECK_SECONDS = 5.0
# Steps per call when nothing is measured yet (the first call also traces the step).
_FIRST_CALL_STEPS = 1
# Proposals are summed over the replicas as float32: exact below 2**24.
_MAX_CALL_STEPS = 1 << 20


class Preempted(SystemExit):
  """SIGTERM stopped training after the checkpoint of the step reached was saved.

  A SystemExit with the status EXIT_PREEMPTED: no `except Exception` takes it for a failure
  (and a fine-tuning run's clean-up keeps what it wrote), and a command that does not catch it
  exits with that status.

  Attributes:
    step: the step reached and saved.
    checkpoint: the saved checkpoint's prefix (in output_dir).
  """

  def __init__(self, step: int, checkpoint: str):
    super().__init__(EXIT_PREEMPTED)
    self.step = step
    self.checkpoint = checkpoint


# The longest training goes without a progress line (a line ends every --iterations_per_loop
# steps; a longer interval also gets lines on the way, the metrics of its steps so far).
PROGRESS_SECONDS = 30.0


def stop_check_seconds() -> float:
  """BERT_TF_STOP_CHECK_SECONDS (default 5): the longest a call of the training step runs
  before the loop looks for a SIGTERM again."""
  text = os.environ.get(STOP_CHECK_ENV, "").strip()
  if not text:
    return DEFAULT_STOP_CHECK_SECONDS
  try:
    value = float(text)
  except ValueError:
    value = -1.0
  if not 0 < value < float("inf"):  # also NaN
    raise TrainingError(f"{STOP_CHECK_ENV}={text!r}: expected a positive number of seconds")
  return value


class _StopRequest:
  """Records a SIGTERM while installed (main thread only: Python runs signal handlers there).

  Python runs the handler when the main thread is back in Python, after the current call of
  the training step, which is when the loop looks at it; the moment the signal came is taken
  from the wake-up file descriptor that the C-level handler writes at once (a thread waits on
  it), so the log says how long the save took after the signal. A second SIGTERM changes
  nothing.
  """

  def __init__(self):
    self.signalled_at: Optional[float] = None
    self._arrived_at: Optional[float] = None

  def _handle(self, signum, frame):
    del signum, frame
    if self.signalled_at is None:
      self.signalled_at = self._arrived_at or time.time()

  @property
  def requested(self) -> bool:
    return self.signalled_at is not None

  def _watch(self, reader: socket.socket, done: threading.Event) -> None:
    while not done.is_set():
      try:
        ready, _, _ = select.select([reader], [], [], 0.2)
        data = reader.recv(64) if ready else b""
      except OSError:
        return
      if self._arrived_at is None and signal.SIGTERM in data:
        self._arrived_at = time.time()

  @contextlib.contextmanager
  def installed(self):
    if threading.current_thread() is not threading.main_thread():
      yield self
      return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    done = threading.Event()
    watcher = threading.Thread(target=self._watch, args=(reader, done), daemon=True,
                               name="bert_tf-sigterm-time")
    previous = signal.signal(signal.SIGTERM, self._handle)
    previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    watcher.start()
    try:
      yield self
    finally:
      signal.set_wakeup_fd(previous_fd)
      signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
      done.set()
      watcher.join()
      reader.close()
      writer.close()


def _agreement(strategy) -> Callable[[bool, int], Tuple[bool, int]]:
  """(this worker's stop request, its proposed steps per call) -> what every worker does.

  With several workers the stop requests and proposals are summed over the replicas (one small
  collective per call of the step): all stop after the same step when any of them was
  signalled, and all run the same number of steps in the next call (the mean proposal; whole
  numbers, so the float sum is exact and the same everywhere). Other strategies have one
  process: its own values.
  """
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return lambda stop, steps: (stop, steps)
  replicas = strategy.num_replicas_in_sync

  @tf.function(autograph=False)
  def agree(values):
    per_replica = strategy.run(lambda: tf.identity(values))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

  def decide(stop, steps):
    total = agree(tf.constant([float(stop), float(steps)], tf.float32)).numpy()
    return bool(total[0] > 0), max(1, int(total[1]) // replicas)

  return decide


def _call_steps(seconds_per_step: Optional[float], budget: float) -> int:
  """Steps one call may run to end within `budget` seconds at the measured rate."""
  if seconds_per_step is None:
    return _FIRST_CALL_STEPS
  return int(max(1, min(_MAX_CALL_STEPS, budget // max(seconds_per_step, 1e-9))))


def _stop_and_save(manager, step: int, num_train_steps: int, chief: bool,
                   signalled_at: Optional[float]) -> Preempted:
  """Saves the checkpoint of `step` (unless the last save was of that step), logs one line and
  returns the Preempted to raise. signalled_at: when this process got the SIGTERM (None: another
  worker got it)."""
  latest = manager.latest_checkpoint
  path = latest if latest and _checkpoint_step(latest) == step else \
      manager.save(checkpoint_number=step)
  if not chief:
    # This worker's copy went to its scratch directory; the chief's is in output_dir.
    path = os.path.join(os.path.dirname(manager.directory), os.path.basename(path))
  when = ("another worker got SIGTERM" if signalled_at is None else
          f"{time.time() - signalled_at:.1f} s after the signal")
  logging.warning(
      "SIGTERM: stopped at step %d/%d and saved checkpoint %s (%s); run the same command "
      "again to resume from step %d (exit status %d)", step, num_train_steps, path, when, step,
      EXIT_PREEMPTED)
  return Preempted(step, path)


# === A lost or frozen worker ===

# A worker lost during training (killed, frozen, its machine gone: see training/cluster.py and
# BERT_TF_PEER_TIMEOUT_SECONDS) ends the others with the same status as a preemption: the run
# is restartable, and relaunching every worker with the same command resumes it, from the last
# periodic checkpoint (the steps after it are lost).
EXIT_WORKER_LOST = EXIT_PREEMPTED


class WorkerLost(SystemExit):
  """Another worker of a multi-worker run was lost during training; one line said which, the
  step, the last checkpoint and how to resume. A SystemExit with the status EXIT_WORKER_LOST.

  Attributes:
    tasks: the lost tasks of TF_CONFIG, [(name, host:port)] (empty when none could be named).
    step: the step training had reached.
    checkpoint: the newest checkpoint in output_dir, None when there is none.
    message: the line.
  """

  def __init__(self, tasks, step: int, checkpoint: Optional[str], message: str):
    super().__init__(EXIT_WORKER_LOST)
    # The command ends the process at once (cli.run): TensorFlow's teardown would wait for the
    # lost task.
    self.exit_at_once = True
    self.tasks = tasks
    self.step = step
    self.checkpoint = checkpoint
    self.message = message

  def __str__(self):
    return self.message


@contextlib.contextmanager
def _worker_loss(strategy, manager, chief: bool, num_train_steps: int,
                 reached: Callable[[], int]):
  """Turns the errors that a lost worker gives the others (a collective aborted, a heartbeat
  unanswered) into WorkerLost, after one line; other errors pass. Multi-worker runs only."""
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    yield
    return
  try:
    yield
  except tf.errors.OpError as e:
    from bert_tf.training import cluster  # pylint: disable=g-import-not-at-top
    lost = cluster.lost_tasks(e)
    if lost is None:
      raise
    output_dir = manager.directory if chief else os.path.dirname(manager.directory)
    try:
      saved = [path for path in run_checkpoints(output_dir) if io.exists(path + ".index")]
    except (OSError, tf.errors.OpError) as listing:
      logging.warning("Cannot list the checkpoints in %s: %s", output_dir, listing)
      saved = None
    checkpoint = saved[0] if saved else None
    step = reached()
    who = cluster.describe_loss(lost)
    relaunch = "relaunch every worker with the same command to"
    resume = (f"the last checkpoint is {checkpoint}: {relaunch} resume from step "
              f"{_checkpoint_step(checkpoint)}" if checkpoint else
              f"{relaunch} resume from the newest checkpoint in {output_dir}" if saved is None
              else f"no checkpoint was saved yet: {relaunch} start again")
    message = (f"{who}; training stopped at step {step}/{num_train_steps}; {resume} (exit "
               f"status {EXIT_WORKER_LOST})")
    if not chief:
      try:
        io.remove(manager.directory)
      except (OSError, tf.errors.OpError) as removing:  # the line matters more than the copies
        logging.warning("Cannot remove %s: %s", manager.directory, removing)
    logging.error("%s", message)
    raise WorkerLost(lost.tasks, step, checkpoint, message) from None


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
    self.budget = stop_check_seconds()
    self.agree = _agreement(trainer.strategy)
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

  def run_interval(self, interval: int, stop: _StopRequest):
    """Calls the step until `interval` steps ran or the workers agree to stop.

    Returns:
      (steps done, their seconds, their summed metrics or None, whether to stop).
    """
    done, elapsed, totals = 0, 0.0, None
    while done < interval:
      stopping, call_steps = self.agree(stop.requested,
                                        _call_steps(self.seconds_per_step, self.budget))
      if stopping:
        return done, elapsed, totals, True
      steps_run, call_time, call_totals = self._call(min(call_steps, interval - done))
      elapsed += call_time
      done += steps_run
      totals = call_totals if totals is None else {k: totals[k] + call_totals[k]
                                                   for k in totals}
      if done < interval and time.time() - self.last_line >= PROGRESS_SECONDS:
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
  stop_check_seconds(), so that a SIGTERM is seen soon: training then stops at the end of
  the current call (every worker after the same step), saves a checkpoint of the step reached
  and raises Preempted (exit status EXIT_PREEMPTED); the same command resumes from it.

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
  stopping = False
  stop = _StopRequest()
  with stop.installed(), _worker_loss(trainer.strategy, manager, chief, num_train_steps,
                                         lambda: run.step):
    while run.step < num_train_steps:
      done, elapsed, totals, stopping = run.run_interval(run.interval(), stop)
      if done:
        run.record(totals, done, elapsed, writer)
      if stopping:
        break
      run.checkpoint_and_evaluate()
    if not stopping:
      # A signal during the last call (every worker takes part, signalled or not): the run
      # stops before evaluating and exporting, its final checkpoint being the step reached.
      stopping, _ = run.agree(stop.requested, 1)
  writer.flush()
  preempted = (_stop_and_save(manager, run.step, num_train_steps, chief, stop.signalled_at)
               if stopping else None)
  if not chief:
    io.remove(manager.directory)
  if preempted is not None:
    if isinstance(trainer.strategy, tf.distribute.MultiWorkerMirroredStrategy):
      from bert_tf.training import cluster  # pylint: disable=g-import-not-at-top
      cluster.finishing(EXIT_PREEMPTED)  # the tasks leave together, quietly
    raise preempted
  return run.last


def evaluate(trainer: Trainer, iterator, num_steps: int, global_step: int,
             output_dir: Optional[str], chief: bool, results_file: bool = True,
             log_every_seconds: float = 10.0) -> Dict[str, float]:
  """Runs num_steps eval batches; the chief writes eval summaries (output_dir/eval) and, with
  results_file, eval_results.txt.

  Progress (batches, batches/s, ETA) is logged every log_every_seconds and at the end; the
  first batch of a run also traces and compiles the eval step (Trainer.eval_step is one
  tf.function for the run: later evaluations, on new iterators of the same dataset, reuse it),
  so the rate counts the batches after it. With results_file the results are logged one per
  line (the original's format), otherwise on one line (evaluations during training).
  """
  logging.info("Evaluating %d batches at step %d", num_steps, global_step)
  start = time.time()
  last_log = start
  first_seconds = 0.0
  batch_sums = []
  for i in range(num_steps):
    batch_sums.append({k: v.numpy() for k, v in trainer.eval_step(iterator).items()})
    now = time.time()
    if i == 0:
      first_seconds = now - start
    if now - last_log >= log_every_seconds or i + 1 == num_steps:
      last_log = now
      rate = i / max(now - start - first_seconds, 1e-9) if i else 1 / max(first_seconds, 1e-9)
      logging.info("eval %d/%d batches, %.1f batches/s (first %.1f s), ETA %s", i + 1,
                   num_steps, rate, first_seconds, format_eta((num_steps - i - 1) / rate))
  results = trainer.task.eval_results(batch_sums)
  results["global_step"] = int(global_step)
  if results_file:
    report_eval_results(results, output_dir, chief)
  else:
    logging.info("eval at step %d: %s (%.1f s, off the training clock)", global_step,
                 " ".join(f"{key} = {results[key]:.4f}" for key in sorted(results)
                          if key != "global_step"), time.time() - start)
  if chief and output_dir:
    writer = tf.summary.create_file_writer(os.path.join(output_dir, "eval"))
    with writer.as_default():
      for key, value in results.items():
        if key != "global_step":
          tf.summary.scalar(key, value, step=results["global_step"])
    writer.close()  # written now: TensorBoard shows each evaluation of a running job
  return results


def report_eval_results(results: Mapping[str, Any], output_dir: Optional[str],
                        chief: bool) -> None:
  """Logs the final results one per line and the chief writes eval_results.txt."""
  logging.info("***** Eval results *****")
  for key in sorted(results):
    logging.info("  %s = %s", key, results[key])
  if chief and output_dir:
    write_eval_results(os.path.join(output_dir, EVAL_RESULTS_FILE), results)


def predict(trainer: Trainer, iterator, num_steps: int, index_key: str = "example_index",
            keep: Tuple[str, ...] = (), sequence_length: Optional[int] = None
            ) -> Dict[str, Any]:
  """Per-example outputs over num_steps batches, in example order, without padding.

  The batches must carry `index_key` (the example's position; negative for padding, see
  input_pipeline.record_dataset), so the order is restored whatever the strategy's
  distribution of batches over replicas and workers. With sequence_length (the records'
  length), per-position outputs of batches cut to a length bucket come back padded to it (the
  cut positions hold input_pipeline.PADDED_LOGIT).

  Returns:
    {name: numpy array [N, ...]} for each model output, `index_key` and the `keep` entries.
  """
  keep = tuple(dict.fromkeys((index_key,) + tuple(keep)))
  chunks: Dict[str, List[Any]] = {}
  start = time.time()
  for step in range(num_steps):
    for key, value in trainer.predict_step(iterator, keep, sequence_length).items():
      chunks.setdefault(key, []).append(value.numpy())
    if (step + 1) % 100 == 0 or step + 1 == num_steps:
      elapsed = time.time() - start
      logging.info("predicted %d/%d batches, %.1f batches/s, ETA %s", step + 1, num_steps,
                   (step + 1) / max(elapsed, 1e-9),
                   format_eta(elapsed / (step + 1) * (num_steps - step - 1)))
  arrays = {key: np.concatenate(values, axis=0) for key, values in chunks.items()}
  index = arrays[index_key]
  order = np.argsort(index, kind="stable")
  order = order[index[order] >= 0]
  return {key: value[order] for key, value in arrays.items()}


def sum_batches(batch_sums: Iterable[Mapping[str, Any]]) -> Dict[str, float]:
  """Adds up per-batch sums key by key."""
  batch_sums = list(batch_sums)
  return {k: sum(float(b[k]) for b in batch_sums) for k in batch_sums[0]}


def write_eval_results(path: str, results: Mapping[str, Any]) -> None:
  """Writes `key = value` lines sorted by key (the original's format), atomically."""
  io.write_text(path, "".join(f"{key} = {results[key]}\n" for key in sorted(results)))


def read_eval_results(path: str) -> Dict[str, float]:
  """Parses an eval_results.txt back into a dict."""
  results = {}
  for line in io.read_text(path).splitlines():
    if line.strip():
      key, value = line.split(" = ", 1)
      results[key] = float(value)
  return results


# === Weights from init_checkpoint ===


def load_init_checkpoint(model, path: str) -> Set[str]:
  """Loads weights only (no optimizer state, no step) into `model` (checkpoints.load_weights).

  Args:
    model: the task's model.
    path: any checkpoint checkpoints.read_weights reads (a run directory for its latest).

  Returns:
    The paths of the model variables that were restored.

  Raises:
    TrainingError: unreadable, of another shape, or sharing no variable with the model.
  """
  try:
    report = checkpoints.load_weights(model, path, strict=False)
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


def dtype_policy(mixed_precision: str):
  """Keras' dtype policy for a run (--mixed_precision) inside a `with` block, the previous one
  restored afterwards (model.layers.dtype_policy, the one helper)."""
  return layers.dtype_policy(MIXED_PRECISION_POLICIES[mixed_precision])
