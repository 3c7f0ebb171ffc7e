"""Pretraining loop: strategy selection, distributed train/eval steps, checkpoints, summaries.

One custom loop serves every tf.distribute strategy (one device, several GPUs, several workers,
TPUs): a `tf.function` runs up to `iterations_per_loop` steps per call (what TPUs need to keep
the host out of the way) and every step goes through `strategy.run`. There is no TPU-specific
branch in the step or the model.

Batch sizes are global: `train_batch_size` examples go into every optimizer update, split over
the replicas and, with gradient accumulation, over `gradient_accumulation_steps` micro-batches
per replica. The loss of an update is the original's formula evaluated on the whole global batch
(the masked-LM denominator is summed over all replicas and micro-batches), so one device, many
devices and accumulation give the same update up to float rounding.
"""

import dataclasses
import json
import os
import time
from typing import Any, Dict, Optional, Set

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from bert_tf import checkpoints
from bert_tf import export
from bert_tf import serving
from bert_tf import features
from bert_tf import input_pipeline
from bert_tf import losses
from bert_tf import optimization
from bert_tf.config import BertConfig
from bert_tf.heads import build_pretraining_model

STRATEGY_NAMES = ("tpu", "mirrored", "multi_worker_mirrored", "one_device")
MIXED_PRECISION_POLICIES = {"none": "float32", "bfloat16": "mixed_bfloat16",
                            "float16": "mixed_float16"}
EVAL_RESULTS_FILE = "eval_results.txt"
EXPORT_DIR = "export"


class TrainingError(RuntimeError):
  """A run that cannot start or go on; the message says why and what to do."""


# === Settings ===


@dataclasses.dataclass(frozen=True)
class PretrainingSettings:
  """Everything a pretraining run needs besides the model config (names follow the flags).

  Attributes:
    input_file: comma-separated TFRecord files or globs of training data.
    output_dir: checkpoints, summaries, eval_results.txt and exports go here.
    eval_input_file: eval data; None evaluates on input_file, as the original did.
    init_checkpoint: weights to start from (ours, original TF1, Model Garden, Hugging Face
      safetensors); ignored when output_dir already holds a checkpoint to resume from.
    max_seq_length, max_predictions_per_seq: the feature lengths of the records.
    do_train, do_eval: what to run.
    train_batch_size: global examples per optimizer update.
    eval_batch_size: global examples per eval step.
    learning_rate, num_train_steps, num_warmup_steps: the schedule (spec section 7).
    save_checkpoints_steps: checkpoint every this many steps (and at the end).
    iterations_per_loop: at most this many steps per tf.function call; metrics are logged and
      summarised after each call.
    max_eval_steps: eval batches (the eval data repeats, as in the original).
    optimizer: "adamw" (the original) or "lamb".
    mixed_precision: "none", "bfloat16" or "float16" (with dynamic loss scaling).
    jit_compile: compile the replica step with XLA.
    gradient_accumulation_steps: micro-batches per update (train_batch_size is split).
    keep_checkpoint_max: checkpoints kept in output_dir.
    dynamic_masking: re-mask every batch on the fly (needs vocab_file).
    vocab_file: the vocab, for dynamic masking and copied beside exports.
    do_lower_case: checked against the data's metadata when given.
    export_at_end: export SavedModels under output_dir/export at the end of training.
    export_every_checkpoint: also export at every checkpoint.
    export_serving: with a vocab_file, exports also write the TF Serving models (raw text in:
      text model, preprocessor, encoder) under <export>/serving (see bert_tf.serving).
    seed: seeds weight init, shuffling and interleaving (None: nondeterministic data order).
    shuffle_buffer_size: records in the training shuffle buffer (1 keeps the file order).
    max_nonfinite_steps: with float16, stop after this many non-finite losses in a row (other
      precisions stop at the first one).
  """
  input_file: str
  output_dir: str
  eval_input_file: Optional[str] = None
  init_checkpoint: Optional[str] = None
  max_seq_length: int = 128
  max_predictions_per_seq: int = 20
  do_train: bool = False
  do_eval: bool = False
  train_batch_size: int = 32
  eval_batch_size: int = 8
  learning_rate: float = 5e-5
  num_train_steps: int = 100000
  num_warmup_steps: int = 10000
  save_checkpoints_steps: int = 1000
  iterations_per_loop: int = 1000
  max_eval_steps: int = 100
  optimizer: str = "adamw"
  mixed_precision: str = "none"
  jit_compile: bool = False
  gradient_accumulation_steps: int = 1
  keep_checkpoint_max: int = 5
  dynamic_masking: bool = False
  vocab_file: Optional[str] = None
  do_lower_case: Optional[bool] = None
  export_at_end: bool = True
  export_every_checkpoint: bool = False
  export_serving: bool = True
  seed: Optional[int] = None
  shuffle_buffer_size: int = 1000
  max_nonfinite_steps: int = 5

  def check(self, num_replicas: int = 1) -> None:
    """Raises TrainingError naming every flag with an impossible value."""
    problems = []
    for name in ("train_batch_size", "eval_batch_size", "num_train_steps",
                 "save_checkpoints_steps", "iterations_per_loop", "max_eval_steps",
                 "gradient_accumulation_steps", "keep_checkpoint_max", "max_seq_length",
                 "max_predictions_per_seq"):
      if getattr(self, name) <= 0:
        problems.append(f"--{name} must be positive, got {getattr(self, name)}")
    if self.num_warmup_steps < 0:
      problems.append(f"--num_warmup_steps must be >= 0, got {self.num_warmup_steps}")
    if self.optimizer not in optimization.OPTIMIZER_NAMES:
      problems.append(f"--optimizer must be one of {', '.join(optimization.OPTIMIZER_NAMES)}, "
                      f"got {self.optimizer!r}")
    if self.mixed_precision not in MIXED_PRECISION_POLICIES:
      problems.append(f"--mixed_precision must be one of {', '.join(MIXED_PRECISION_POLICIES)}"
                      f", got {self.mixed_precision!r}")
    split = num_replicas * max(1, self.gradient_accumulation_steps)
    if self.train_batch_size > 0 and self.train_batch_size % split:
      problems.append(f"--train_batch_size={self.train_batch_size} must be a multiple of "
                      f"replicas ({num_replicas}) x --gradient_accumulation_steps "
                      f"({self.gradient_accumulation_steps})")
    if self.do_eval and self.eval_batch_size > 0 and self.eval_batch_size % num_replicas:
      problems.append(f"--eval_batch_size={self.eval_batch_size} must be a multiple of the "
                      f"number of replicas ({num_replicas})")
    if self.dynamic_masking and not self.vocab_file:
      problems.append("--dynamic_masking needs --vocab_file (for the [MASK]/[CLS]/[SEP] ids)")
    if not (self.do_train or self.do_eval):
      problems.append("at least one of --do_train or --do_eval must be True")
    if problems:
      raise TrainingError("; ".join(problems))


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
    return tf.distribute.MultiWorkerMirroredStrategy()
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


# === Loss and metrics for one distributed step ===


def _replica_loss(outputs, batch, global_mlm_weight, examples_per_update):
  """This replica's share of the loss of one update, and its metric sums.

  The shares of all replicas and micro-batches add up to the original's loss on the whole
  global batch: sum(w * nll) / (sum(w) + 1e-5) with sums over the global batch, plus the mean
  next-sentence cross-entropy over the global batch.
  """
  mlm_logits = tf.cast(outputs["masked_lm_logits"], tf.float32)
  nsp_logits = tf.cast(outputs["next_sentence_logits"], tf.float32)
  weights = tf.cast(batch["masked_lm_weights"], tf.float32)
  labels = tf.cast(batch["masked_lm_ids"], tf.int32)
  nsp_labels = tf.reshape(tf.cast(batch["next_sentence_labels"], tf.int32), [-1])
  mlm_nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=mlm_logits)
  nsp_nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=nsp_labels, logits=nsp_logits)
  mlm_sum = tf.reduce_sum(weights * mlm_nll)
  nsp_sum = tf.reduce_sum(nsp_nll)
  loss = (mlm_sum / (global_mlm_weight + losses.MASKED_LM_DENOMINATOR_EPSILON)
          + nsp_sum / float(examples_per_update))
  correct = tf.cast(tf.equal(tf.argmax(mlm_logits, -1, output_type=tf.int32), labels), tf.float32)
  nsp_correct = tf.cast(tf.equal(tf.argmax(nsp_logits, -1, output_type=tf.int32), nsp_labels),
                        tf.float32)
  sums = dict(mlm_correct=tf.reduce_sum(weights * correct), mlm_weight=tf.reduce_sum(weights),
              nsp_correct=tf.reduce_sum(nsp_correct),
              examples=tf.cast(tf.shape(nsp_labels)[0], tf.float32))
  return loss, sums


def _model_inputs(batch):
  return {key: batch[key] for key in ("input_ids", "input_mask", "segment_ids",
                                      "masked_lm_positions")}


class Trainer:
  """Builds the distributed train and eval functions for a model under a strategy.

  Args:
    strategy: the tf.distribute strategy; `model` and `optimizer` must have been created (and
      the optimizer built) inside its scope.
    model: a pretraining model (build_pretraining_model).
    optimizer: from optimization.create_optimizer (a LossScaleOptimizer for float16).
    train_batch_size: global examples per update.
    gradient_accumulation_steps: micro-batches per update; the training dataset then yields
      stacked micro-batches [k, b, ...] per replica.
    jit_compile: compile the replica step with XLA.
    max_nonfinite_steps: see PretrainingSettings.
  """

  def __init__(self, strategy, model, optimizer, train_batch_size: int,
               gradient_accumulation_steps: int = 1, jit_compile: bool = False,
               max_nonfinite_steps: int = 5):
    self.strategy = strategy
    self.model = model
    self.optimizer = optimizer
    self.train_batch_size = train_batch_size
    self.accumulation = gradient_accumulation_steps
    self.loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    # A float16 loss scaler skips overflowing steps itself; otherwise one non-finite loss stops.
    self.max_nonfinite_steps = max_nonfinite_steps if self.loss_scaled else 1
    self._replica_step = tf.function(self._replica_step_fn, jit_compile=jit_compile)
    self.train_loop = tf.function(self._train_loop_fn)
    self.eval_step = tf.function(self._eval_step_fn)

  # --- training ---

  def _gradients(self, batch, global_mlm_weight):
    variables = self.model.trainable_variables
    with tf.GradientTape() as tape:
      outputs = self.model(_model_inputs(batch), training=True)
      loss, sums = _replica_loss(outputs, batch, global_mlm_weight, self.train_batch_size)
      scaled = self.optimizer.scale_loss(loss) if self.loss_scaled else loss
    grads = tape.gradient(scaled, variables)
    # Embedding gradients come as IndexedSlices; accumulation needs dense tensors anyway.
    return loss, sums, [tf.convert_to_tensor(g) for g in grads]

  def _replica_step_fn(self, batch):
    """One optimizer update on this replica's share of the global batch."""
    ctx = tf.distribute.get_replica_context()
    weights = tf.cast(batch["masked_lm_weights"], tf.float32)
    global_mlm_weight = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.reduce_sum(weights))
    if self.accumulation == 1:
      loss, sums, grads = self._gradients(batch, global_mlm_weight)
    else:
      # batch holds [k, b, ...]: k micro-batches, gradients summed in-graph, clipped once below.
      variables = self.model.trainable_variables
      grads = [tf.zeros(v.shape, v.dtype) for v in variables]
      loss = tf.constant(0.0)
      sums = {k: tf.constant(0.0) for k in ("mlm_correct", "mlm_weight", "nsp_correct",
                                             "examples")}
      for i in tf.range(self.accumulation):
        micro = {key: value[i] for key, value in batch.items()}
        micro_loss, micro_sums, micro_grads = self._gradients(micro, global_mlm_weight)
        grads = [a + tf.cast(g, a.dtype) for a, g in zip(grads, micro_grads)]
        loss += micro_loss
        sums = {k: sums[k] + micro_sums[k] for k in sums}
    scale = self.optimizer.dynamic_scale if self.loss_scaled else None
    grads, grad_norm = optimization.clip_by_global_norm(grads, 1.0, loss_scale=scale)
    self.optimizer.apply(grads, self.model.trainable_variables)
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
    totals = {k: tf.constant(0.0) for k in ("loss", "mlm_correct", "mlm_weight",
                                             "nsp_correct", "examples")}
    steps = tf.constant(0)
    bad = tf.constant(0)
    for _ in tf.range(num_steps):
      per_replica = self.strategy.run(self._replica_step, args=(next(iterator),))
      step_sums = {k: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
                   for k, v in per_replica.items()}
      finite = tf.math.is_finite(step_sums["loss"]) & (step_sums["bad_gradients"] == 0.0)
      bad = tf.where(finite, 0, bad + 1)
      # Non-finite losses would poison the logged mean; they are counted instead.
      step_sums["loss"] = tf.where(finite, step_sums["loss"], 0.0)
      totals = {k: totals[k] + step_sums[k] for k in totals}
      steps += 1
      if bad >= self.max_nonfinite_steps:
        break
    return steps, bad, totals

  # --- evaluation ---

  def _eval_step_fn(self, iterator):
    def replica_eval(batch):
      outputs = self.model(_model_inputs(batch), training=False)
      mlm_logits = tf.cast(outputs["masked_lm_logits"], tf.float32)
      weights = tf.cast(batch["masked_lm_weights"], tf.float32)
      labels = tf.cast(batch["masked_lm_ids"], tf.int32)
      nsp_labels = tf.reshape(tf.cast(batch["next_sentence_labels"], tf.int32), [-1])
      mlm_nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=mlm_logits)
      nsp_nll = tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=nsp_labels, logits=tf.cast(outputs["next_sentence_logits"], tf.float32))
      correct = tf.cast(tf.equal(tf.argmax(mlm_logits, -1, output_type=tf.int32), labels),
                        tf.float32)
      nsp_correct = tf.cast(tf.equal(tf.argmax(outputs["next_sentence_logits"], -1,
                                               output_type=tf.int32), nsp_labels), tf.float32)
      return dict(mlm_nll=tf.reduce_sum(weights * mlm_nll), mlm_weight=tf.reduce_sum(weights),
                  mlm_correct=tf.reduce_sum(weights * correct), nsp_nll=tf.reduce_sum(nsp_nll),
                  nsp_correct=tf.reduce_sum(nsp_correct),
                  examples=tf.cast(tf.shape(nsp_labels)[0], tf.float32))
    per_replica = self.strategy.run(replica_eval, args=(next(iterator),))
    return {k: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
            for k, v in per_replica.items()}


def eval_metrics_from_sums(batch_sums) -> Dict[str, float]:
  """The original's eval metrics from per-batch sums (a list of dicts of eval_step results).

  masked_lm_accuracy and masked_lm_loss are weighted by masked_lm_weights over the whole eval
  set and the next-sentence metrics averaged over all examples (the original's tf.metrics);
  `loss` is the mean over batches of the batch loss (as the Estimator reports it).
  """
  total = {k: sum(float(b[k]) for b in batch_sums) for k in batch_sums[0]}
  eps = losses.MASKED_LM_DENOMINATOR_EPSILON
  batch_losses = [float(b["mlm_nll"]) / (float(b["mlm_weight"]) + eps)
                  + float(b["nsp_nll"]) / float(b["examples"]) for b in batch_sums]
  return dict(
      masked_lm_accuracy=total["mlm_correct"] / max(total["mlm_weight"], eps),
      masked_lm_loss=total["mlm_nll"] / max(total["mlm_weight"], eps),
      next_sentence_accuracy=total["nsp_correct"] / total["examples"],
      next_sentence_loss=total["nsp_nll"] / total["examples"],
      loss=float(np.mean(batch_losses)))


def write_eval_results(path: str, results: Dict[str, Any]) -> None:
  """Writes `key = value` lines sorted by key (the original's format), atomically."""
  tmp = path + ".tmp"
  with tf.io.gfile.GFile(tmp, "w") as f:
    for key in sorted(results):
      f.write(f"{key} = {results[key]}\n")
  tf.io.gfile.rename(tmp, path, overwrite=True)


def read_eval_results(path: str) -> Dict[str, float]:
  """Parses an eval_results.txt back into a dict."""
  results = {}
  with tf.io.gfile.GFile(path, "r") as f:
    for line in f:
      if line.strip():
        key, value = line.split(" = ", 1)
        results[key] = float(value)
  return results


# === Weights from init_checkpoint ===


def load_init_checkpoint(model, path: str) -> Set[str]:
  """Loads weights only (no optimizer state, no step) into `model`.

  Args:
    model: the pretraining model.
    path: one of our training checkpoints (or a directory of them), an original TF1
      checkpoint, a Model Garden checkpoint, Hugging Face safetensors or a .keras model.

  Returns:
    The paths of the model variables that were restored.

  Raises:
    TrainingError: unreadable, of another shape, or sharing no variable with the model.
  """
  if tf.io.gfile.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if latest is None:
      raise TrainingError(f"--init_checkpoint={path}: the directory holds no checkpoint")
    path = latest
  restored = set()
  if checkpoints.is_training_checkpoint(path):
    try:
      checkpoints.restore_training_checkpoint(model, path)
    except ValueError as e:
      raise TrainingError(f"--init_checkpoint={path}: {e}") from None
    restored = {v.path for v in model.weights}
  else:
    try:
      kind = checkpoints.detect_format(path)
      if kind == "tf1":
        report = checkpoints.load_tf1_checkpoint(model, path, strict=False)
      elif kind == "model_garden":
        report = checkpoints.load_model_garden_encoder(model, path, strict=False)
      elif kind == "hf":
        report = checkpoints.load_hf_safetensors(model, path, strict=False)
      else:
        source = keras.models.load_model(path)
        report = checkpoints.set_original_weights(
            model, checkpoints.get_original_weights(source), strict=False, source=path)
    except (FileNotFoundError, ValueError, KeyError) as e:
      raise TrainingError(f"--init_checkpoint={path}: {e}") from None
    if report.mismatched:
      raise TrainingError(f"--init_checkpoint={path}: shapes differ from the model built from "
                          f"--bert_config_file: {'; '.join(report.mismatched)}")
    loaded = set(report.loaded)
    restored = {v.path for v in model.weights
                if checkpoints.original_name(v.path)[0] in loaded}
  if not restored:
    raise TrainingError(f"--init_checkpoint={path}: no variable of the model was found in it")
  return restored


def log_variables(model, restored: Set[str] = frozenset()) -> None:
  """Logs every trainable variable, marking those from init_checkpoint (as the original)."""
  logging.info("**** Trainable Variables ****")
  for variable in model.trainable_variables:
    mark = ", *INIT_FROM_CKPT*" if variable.path in restored else ""
    logging.info("  name = %s, shape = %s%s", variable.path, tuple(variable.shape), mark)


# === The run ===


def _format_eta(seconds: float) -> str:
  seconds = int(max(0, seconds))
  return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _train_dataset_fn(settings: PretrainingSettings, masking, skip_batches: int = 0):
  micro_batch = settings.train_batch_size // settings.gradient_accumulation_steps

  def dataset_fn(ctx):
    dataset = input_pipeline.pretraining_dataset(
        settings.input_file, settings.max_seq_length, settings.max_predictions_per_seq,
        batch_size=micro_batch, is_training=True, input_context=ctx, seed=settings.seed,
        shuffle_buffer_size=settings.shuffle_buffer_size, dynamic_masking=masking)
    if settings.gradient_accumulation_steps > 1:
      dataset = dataset.batch(settings.gradient_accumulation_steps, drop_remainder=True)
    if skip_batches:
      dataset = dataset.skip(skip_batches)
    logging.info("*** Features (per replica) ***")
    for name, spec in dataset.element_spec.items():
      logging.info("  name = %s, shape = %s", name, spec.shape)
    return dataset
  return dataset_fn


def _eval_dataset_fn(settings: PretrainingSettings):
  def dataset_fn(ctx):
    return input_pipeline.pretraining_dataset(
        settings.eval_input_file or settings.input_file, settings.max_seq_length,
        settings.max_predictions_per_seq, batch_size=settings.eval_batch_size,
        is_training=False, input_context=ctx, repeat=True)
  return dataset_fn


def _check_data(settings: PretrainingSettings, config: BertConfig, pattern: str,
                flag: str) -> Optional[Dict[str, Any]]:
  try:
    files = input_pipeline.expand_file_patterns(pattern, flag_name=flag)
    return input_pipeline.check_input_metadata(
        files, settings.max_seq_length, settings.max_predictions_per_seq,
        vocab_size=config.vocab_size, do_lower_case=settings.do_lower_case)
  except (input_pipeline.InputError, features.MetadataError) as e:
    # Both errors already name the flag and the file.
    raise TrainingError(str(e)) from None


def run_pretraining(config: BertConfig, settings: PretrainingSettings,
                    strategy: Optional[tf.distribute.Strategy] = None) -> Dict[str, Any]:
  """Trains and/or evaluates a BERT pretraining model; resumes from output_dir if possible.

  Args:
    config: the model config.
    settings: the run (see PretrainingSettings).
    strategy: a tf.distribute strategy (select_strategy()); None uses the default.

  Returns:
    A dict with global_step, model (the trained keras.Model), the last logged train metrics
    (train_loss, train_masked_lm_accuracy, train_next_sentence_accuracy, learning_rate,
    examples_per_second), the eval results (when evaluated) and export_dir (when exported).

  Raises:
    TrainingError: bad settings or data, an unreadable init_checkpoint, or a non-finite loss.
  """
  strategy = strategy or select_strategy()
  settings.check(strategy.num_replicas_in_sync)
  if settings.max_seq_length > config.max_position_embeddings:
    raise TrainingError(f"--max_seq_length={settings.max_seq_length} is more than the "
                        f"config's max_position_embeddings={config.max_position_embeddings}")
  metadata = _check_data(settings, config, settings.input_file, "input_file")
  if settings.do_eval and settings.eval_input_file:
    _check_data(settings, config, settings.eval_input_file, "eval_input_file")
  chief = is_chief(strategy)
  tf.io.gfile.makedirs(settings.output_dir)
  if chief:
    config.to_json_file(os.path.join(settings.output_dir, "bert_config.json"))
  if settings.seed is not None:
    keras.utils.set_random_seed(settings.seed)

  previous_policy = keras.config.dtype_policy()
  keras.config.set_dtype_policy(MIXED_PRECISION_POLICIES[settings.mixed_precision])
  try:
    return _run(config, settings, strategy, chief, metadata)
  finally:
    keras.config.set_dtype_policy(previous_policy)


def _run(config, settings, strategy, chief, metadata):
  masking = None
  if settings.dynamic_masking:
    from bert_tf import tokenization  # pylint: disable=g-import-not-at-top
    vocab = tokenization.load_vocab(settings.vocab_file)
    masking = input_pipeline.DynamicMasking.from_vocab(
        vocab, seed=settings.seed if settings.seed is not None else 12345)

  with strategy.scope():
    # The last layer runs only at [CLS] and the masked positions: same losses, fewer FLOPs.
    model = build_pretraining_model(config, prune_last_layer=True)
    optimizer = optimization.create_optimizer(
        settings.optimizer, settings.learning_rate, settings.num_train_steps,
        settings.num_warmup_steps, loss_scale=settings.mixed_precision == "float16")
    optimizer.build(model.trainable_variables)
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                              aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
  trainer = Trainer(strategy, model, optimizer, settings.train_batch_size,
                    settings.gradient_accumulation_steps, settings.jit_compile,
                    settings.max_nonfinite_steps)

  # Layers are tracked by name (see checkpoints.checkpointable), so export and serving can
  # restore these weights into the full (unpruned) graph.
  checkpoint = tf.train.Checkpoint(model=checkpoints.checkpointable(model), optimizer=optimizer,
                                   step=global_step)
  # Non-chief workers must take part in saving (collectives) but write to a scratch directory.
  checkpoint_dir = settings.output_dir
  if not chief:
    task_id = strategy.cluster_resolver.task_id
    checkpoint_dir = os.path.join(settings.output_dir, f".worker_{task_id}_tmp")
  manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir,
                                       max_to_keep=settings.keep_checkpoint_max)
  latest = tf.train.latest_checkpoint(settings.output_dir)
  restored = set()
  if latest:
    logging.info("Resuming from %s", latest)
    checkpoint.restore(latest).assert_existing_objects_matched()
  elif settings.init_checkpoint:
    restored = load_init_checkpoint(model, settings.init_checkpoint)
  elif settings.do_eval and not settings.do_train:
    logging.warning("Evaluating randomly initialised weights: %s holds no checkpoint and no "
                    "--init_checkpoint was given", settings.output_dir)
  log_variables(model, restored)

  train_iterator = None
  if settings.do_train:
    # tf.distribute iterators cannot be checkpointed (TF 2.20), so the data position is the
    # step: a resumed run skips the batches already used. With --seed the order of the
    # records is fixed and the resumed run sees exactly the batches an uninterrupted run
    # would.
    train_iterator = iter(strategy.distribute_datasets_from_function(
        _train_dataset_fn(settings, masking, skip_batches=int(global_step.numpy()))))

  result: Dict[str, Any] = {"model": model}
  if settings.do_train:
    result.update(_train(settings, strategy, trainer, train_iterator, global_step, manager,
                         chief, config, metadata))
  result["global_step"] = int(global_step.numpy())
  if settings.do_eval:
    result.update(_evaluate(settings, strategy, trainer, global_step, chief))
  if settings.do_train and settings.export_at_end and chief:
    result["export_dir"] = _export(model, config, settings, metadata, int(global_step.numpy()))
  return result


def _export(model, config, settings, metadata, step):
  export_dir = os.path.join(settings.output_dir, EXPORT_DIR, str(step))
  export.export_saved_models(model, config, export_dir, vocab_file=settings.vocab_file,
                             data_metadata=metadata)
  logging.info("Exported the encoder and the pretraining model to %s", export_dir)
  if settings.export_serving and settings.vocab_file:
    do_lower_case = settings.do_lower_case
    if do_lower_case is None:
      do_lower_case = bool((metadata or {}).get("do_lower_case", True))
    paths = serving.export_serving_models(
        config, checkpoints.get_original_weights(model), settings.vocab_file,
        os.path.join(export_dir, "serving"), do_lower_case=do_lower_case,
        seq_length=settings.max_seq_length, data_metadata=metadata)
    logging.info("Exported the TF Serving models to %s", ", ".join(sorted(paths.values())))
  return export_dir


def _train(settings, strategy, trainer, iterator, global_step, manager, chief, config,
           metadata):
  optimizer = trainer.optimizer
  num_replicas = strategy.num_replicas_in_sync
  micro_batch = settings.train_batch_size // num_replicas // settings.gradient_accumulation_steps
  logging.info("Training: global batch %d, %d replica(s), per-replica batch %d%s, "
               "%d steps (from step %d), %s, mixed precision %s",
               settings.train_batch_size, num_replicas,
               settings.train_batch_size // num_replicas,
               (f" in {settings.gradient_accumulation_steps} micro-batches of "
                f"{micro_batch}"
                if settings.gradient_accumulation_steps > 1 else ""),
               settings.num_train_steps, int(global_step.numpy()), settings.optimizer,
               settings.mixed_precision)
  writer = (tf.summary.create_file_writer(settings.output_dir) if chief
            else tf.summary.create_noop_writer())
  last = {}
  start_step = int(global_step.numpy())
  start_time = time.time()
  step = start_step
  while step < settings.num_train_steps:
    next_save = (step // settings.save_checkpoints_steps + 1) * settings.save_checkpoints_steps
    num_steps = min(settings.iterations_per_loop, settings.num_train_steps - step,
                    next_save - step)
    loop_start = time.time()
    steps_run, bad, totals = trainer.train_loop(iterator, tf.constant(num_steps))
    steps_run, bad = int(steps_run), int(bad)
    elapsed = time.time() - loop_start
    global_step.assign_add(steps_run)
    step = int(global_step.numpy())
    if bad >= trainer.max_nonfinite_steps:
      raise TrainingError(
          f"non-finite loss at step {step} ({bad} in a row); the last good checkpoint is "
          f"{manager.latest_checkpoint or 'none (no checkpoint was written)'}. Lower "
          "--learning_rate, check the data, or use --mixed_precision=float16 loss scaling")
    totals = {k: float(v) for k, v in totals.items()}
    good_steps = max(1, steps_run - bad)
    lr = float(optimizer.learning_rate)
    last = dict(train_loss=totals["loss"] / good_steps,
                train_masked_lm_accuracy=totals["mlm_correct"] / max(totals["mlm_weight"], 1e-5),
                train_next_sentence_accuracy=totals["nsp_correct"] / max(totals["examples"], 1),
                learning_rate=lr,
                examples_per_second=totals["examples"] / max(elapsed, 1e-9))
    done = step - start_step
    eta = (time.time() - start_time) / done * (settings.num_train_steps - step)
    logging.info("step %d/%d loss = %.4f masked_lm_accuracy = %.4f next_sentence_accuracy = "
                 "%.4f learning_rate = %.3g examples/s = %.1f ETA %s", step,
                 settings.num_train_steps, last["train_loss"], last["train_masked_lm_accuracy"],
                 last["train_next_sentence_accuracy"], lr, last["examples_per_second"],
                 _format_eta(eta))
    with writer.as_default():
      tf.summary.scalar("loss", last["train_loss"], step=step)
      tf.summary.scalar("masked_lm_accuracy", last["train_masked_lm_accuracy"], step=step)
      tf.summary.scalar("next_sentence_accuracy", last["train_next_sentence_accuracy"],
                        step=step)
      tf.summary.scalar("learning_rate", lr, step=step)
      tf.summary.scalar("examples_per_second", last["examples_per_second"], step=step)
    if step % settings.save_checkpoints_steps == 0 or step >= settings.num_train_steps:
      path = manager.save(checkpoint_number=step)
      logging.info("Saved checkpoint %s", path)
      if settings.export_every_checkpoint and chief and step < settings.num_train_steps:
        _export(trainer.model, config, settings, metadata, step)
  writer.flush()
  if not chief:
    tf.io.gfile.rmtree(manager.directory)
  return last


def _evaluate(settings, strategy, trainer, global_step, chief):
  iterator = iter(strategy.distribute_datasets_from_function(_eval_dataset_fn(settings)))
  batch_sums = [{k: v.numpy() for k, v in trainer.eval_step(iterator).items()}
                for _ in range(settings.max_eval_steps)]
  results = eval_metrics_from_sums(batch_sums)
  results["global_step"] = int(global_step.numpy())
  logging.info("***** Eval results *****")
  for key in sorted(results):
    logging.info("  %s = %s", key, results[key])
  if chief:
    write_eval_results(os.path.join(settings.output_dir, EVAL_RESULTS_FILE), results)
    with tf.summary.create_file_writer(os.path.join(settings.output_dir, "eval")).as_default():
      for key, value in results.items():
        if key != "global_step":
          tf.summary.scalar(key, value, step=results["global_step"])
  return results
