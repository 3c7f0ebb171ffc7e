"""Pretraining (masked LM + next sentence) as a task of the generic loop, and its run.

`run_pretraining(config, settings)` is the library behind `python -m bert_tf.run_pretraining`:
it checks the data against the flags, builds the model (the last layer pruned to the rows the
heads read) and the optimizer under the strategy, resumes from output_dir or loads
init_checkpoint, trains and evaluates with loop.Trainer, and hands the trained model to the
exporter it is given (model.exporting; training never imports serving).

The loss of an update is the original's (run_pretraining.py:get_masked_lm_output and
get_next_sentence_output) evaluated on the whole global batch: sum(w * nll) / (sum(w) + 1e-5)
with the sums over every replica and micro-batch, plus the mean next-sentence cross-entropy.
"""

import contextlib
import dataclasses
import json
from typing import Any, Dict, List, Mapping, Optional

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf import record_schema
from bert_tf import row_packing
from bert_tf import tokenization
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model import exporting
from bert_tf.model import provenance
from bert_tf.model.encoder import PACKED_INPUTS
from bert_tf.model.heads import MASKED_LM_HIDDEN, PRETRAINING_INPUTS, build_pretraining_model
from bert_tf.training import bucketing
from bert_tf.training import distillation
from bert_tf.training import distribution
from bert_tf.training import evaluation
from bert_tf.training import input_pipeline
from bert_tf.training import layer_selection
from bert_tf.training import loop
from bert_tf.training import losses
from bert_tf.training import optimization
from bert_tf.training import packed_rows
from bert_tf.training import record_files
from bert_tf.training import remasking
from bert_tf.training import run_folder
from bert_tf.training import run_result
from bert_tf.training.distillation import predictions as distill_predictions
from bert_tf.training.distillation import pretraining_teacher
from bert_tf.training.errors import TrainingError

DATA_METADATA_FILE = provenance.DATA_METADATA_FILE


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
    learning_rate, num_train_steps, num_warmup_steps: the schedule (the original's
      optimization.py:create_optimizer: linear warmup, then linear decay to 0).
    save_checkpoints_steps: checkpoint every this many steps (and at the end).
    iterations_per_loop: metrics are logged and summarised every this many steps; a
      tf.function call runs at most this many (fewer when they would outlast
      stopping.stop_check_seconds(), so that a SIGTERM is seen soon).
    max_eval_steps: eval batches (the eval data repeats, as in the original).
    eval_every_n_steps: also evaluate (max_eval_steps batches of the eval data, the same
      batches every time) every this many training steps, off the training clock: a log line
      and TensorBoard summaries under output_dir/eval; 0: only at the end (--do_eval).
    optimizer: "adamw" (the original) or "lamb".
    mixed_precision: "none", "bfloat16" or "float16" (with dynamic loss scaling).
    jit_compile: compile the replica step with XLA.
    gradient_accumulation_steps: micro-batches per update (train_batch_size is split).
    cpu_towers: on CPUs, each replica's (micro-)batch runs as this many towers side by side,
      each op on one thread (loop.Trainer's towers, distribution.use_cpu_towers): the same update;
      1 (the default) computes it as one batch whose ops split their work over the cores.
    keep_checkpoint_max: checkpoints kept in output_dir.
    dynamic_masking: re-mask every batch on the fly (needs vocab_file).
    vocab_file: the vocab, for dynamic masking and copied beside exports.
    do_lower_case: checked against the data's metadata when given.
    allow_tokenizer_mismatch: a vocab_file whose md5 differs from the data's recorded
      vocab_md5 is a warning instead of an error.
    export_at_end: export SavedModels under output_dir/export at the end of training.
    export_every_checkpoint: also export at every checkpoint.
    export_serving: with a vocab_file, exports also write the TF Serving models (raw text in:
      text model, preprocessor, encoder) under <export>/serving (see bert_tf.serving); used
      by the export step run_pretraining is given.
    seed: seeds weight init, shuffling and interleaving (None: nondeterministic data order).
    shuffle_buffer_size: records in the training shuffle buffer (1 keeps the file order).
    max_nonfinite_steps: with float16, stop after this many non-finite losses in a row (other
      precisions stop at the first one).
    packing: several instances per row (bert_tf.row_packing): "none", "exact" (each step the
      train_batch_size instances of the unpacked run in the fewest rows) or "static" (a fixed
      number of rows, about train_batch_size instances on average, one shape for TPUs);
      evaluation batches are packed exactly whenever it is not "none". "auto" is "none" here:
      the original's data fills most instances to max_seq_length (short_seq_prob 0.1), where
      packing saves little; choose it for corpora of short documents.
    teacher: distil from this pretrained model with its masked-LM head
      (training/distillation/pretraining_teacher.py); None: no teacher.
    distill_alpha: with a teacher, the weight of the masked LM on the labels; the soft masked
      LM weighs 1 - alpha.
    distill_temperature: the temperature T of the soft masked LM (scaled by T^2).
    distill_cosine_weight: the weight of the cosine loss of the last hidden states at the
      masked positions; None: 1 when the teacher's hidden size is the student's, else 0.
    init_layers: which encoder layers of an init_checkpoint deeper than the model it takes
      (training/layer_selection.py: even, first, or the checkpoint's layer numbers).
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
  eval_every_n_steps: int = 0
  optimizer: str = "adamw"
  adam_bias_correction: bool = False
  mixed_precision: str = "none"
  jit_compile: bool = False
  gradient_accumulation_steps: int = 1
  cpu_towers: int = 1
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
  allow_tokenizer_mismatch: bool = False
  packing: str = "none"
  teacher: Optional[str] = None
  distill_alpha: float = distillation.DEFAULT_ALPHA
  distill_temperature: float = distillation.DEFAULT_TEMPERATURE
  distill_cosine_weight: Optional[float] = None
  init_layers: str = layer_selection.EVEN

  @property
  def packing_mode(self) -> packed_rows.PackingMode:
    """--packing parsed (packed_rows.PackingMode); row_packing.PackingError if unknown."""
    return packed_rows.PackingMode.parse(self.packing)

  def check(self, num_replicas: int = 1) -> None:
    """Raises TrainingError naming every flag with an impossible value."""
    problems = []
    for name in ("train_batch_size", "eval_batch_size", "num_train_steps",
                 "save_checkpoints_steps", "iterations_per_loop", "max_eval_steps",
                 "gradient_accumulation_steps", "cpu_towers", "keep_checkpoint_max",
                 "max_seq_length", "max_predictions_per_seq"):
      if getattr(self, name) <= 0:
        problems.append(f"--{name} must be positive, got {getattr(self, name)}")
    if self.num_warmup_steps < 0:
      problems.append(f"--num_warmup_steps must be >= 0, got {self.num_warmup_steps}")
    if self.eval_every_n_steps < 0:
      problems.append(f"--eval_every_n_steps must be >= 0, got {self.eval_every_n_steps}")
    elif self.eval_every_n_steps and not self.do_train:
      problems.append("--eval_every_n_steps evaluates during training: it needs --do_train")
    if self.optimizer not in optimization.OPTIMIZER_NAMES:
      problems.append(f"--optimizer must be one of {', '.join(optimization.OPTIMIZER_NAMES)}, "
                      f"got {self.optimizer!r}")
    if self.mixed_precision not in distribution.MIXED_PRECISION_POLICIES:
      problems.append(f"--mixed_precision must be one of "
                      f"{', '.join(distribution.MIXED_PRECISION_POLICIES)}, "
                      f"got {self.mixed_precision!r}")
    split = num_replicas * max(1, self.gradient_accumulation_steps) * max(1, self.cpu_towers)
    if self.train_batch_size > 0 and self.train_batch_size % split:
      problems.append(f"--train_batch_size={self.train_batch_size} must be a multiple of "
                      f"replicas ({num_replicas}) x --gradient_accumulation_steps "
                      f"({self.gradient_accumulation_steps}) x --cpu_towers "
                      f"({self.cpu_towers})")
    if ((self.do_eval or self.eval_every_n_steps) and self.eval_batch_size > 0
        and self.eval_batch_size % num_replicas):
      problems.append(f"--eval_batch_size={self.eval_batch_size} must be a multiple of the "
                      f"number of replicas ({num_replicas})")
    if self.dynamic_masking and not self.vocab_file:
      problems.append("--dynamic_masking needs --vocab_file (for the [MASK]/[CLS]/[SEP] ids)")
    if not (self.do_train or self.do_eval):
      problems.append("at least one of --do_train or --do_eval must be True")
    try:
      if self.packing_mode.exact and self.cpu_towers > 1:
        problems.append(f"--cpu_towers={self.cpu_towers} needs training batches of a fixed "
                        "number of rows: --packing=exact changes it from step to step (use "
                        "--packing=static)")
    except row_packing.PackingError as e:
      problems.append(str(e))
    problems += pretraining_teacher.settings_problems(self)
    try:
      layer_selection.parse_init_layers(self.init_layers)
    except ValueError as e:
      problems.append(str(e))
    if problems:
      raise TrainingError("; ".join(problems))


# === The task ===


def model_inputs(batch):
  """The model's inputs of a batch (with packed rows' input_position_ids and
  packed_cls_positions when it has them)."""
  return {key: batch[key] for key in PRETRAINING_INPUTS + PACKED_INPUTS if key in batch}


def normalizers(batch):
  """The masked-LM weight of the replica's whole batch (all micro-batches), to all-reduce;
  for packed rows also its instances (static packing varies them)."""
  out = dict(masked_lm_weight=tf.reduce_sum(tf.cast(batch["masked_lm_weights"], tf.float32)))
  if input_pipeline.NEXT_SENTENCE_WEIGHTS in batch:
    out["examples"] = tf.reduce_sum(batch[input_pipeline.NEXT_SENTENCE_WEIGHTS])
  return out


def _next_sentence_sums(outputs, batch):
  """The next-sentence sums; packed rows count their real slots only."""
  if input_pipeline.NEXT_SENTENCE_WEIGHTS not in batch:
    return losses.classification_sums(outputs["next_sentence_logits"],
                                       batch["next_sentence_labels"])
  logits = tf.cast(outputs["next_sentence_logits"], tf.float32)
  labels = tf.reshape(tf.cast(batch["next_sentence_labels"], tf.int32), [-1])
  weights = tf.reshape(tf.cast(batch[input_pipeline.NEXT_SENTENCE_WEIGHTS], tf.float32), [-1])
  return dict(nll=tf.reduce_sum(weights * losses.sparse_nll(logits, labels)),
              correct=tf.reduce_sum(weights * losses.correct(logits, labels)),
              examples=tf.reduce_sum(weights))


def _loss_terms(outputs, batch, global_normalizers, examples_per_update):
  """(the masked LM's nll sum, the masked-LM denominator of the global batch, this replica's
  next-sentence share of the loss, the metric sums)."""
  mlm = losses.masked_lm_sums(outputs["masked_lm_logits"], batch["masked_lm_ids"],
                              batch["masked_lm_weights"])
  nsp = _next_sentence_sums(outputs, batch)
  instances = (tf.maximum(global_normalizers["examples"], 1.0)
               if "examples" in global_normalizers else float(examples_per_update))
  denominator = global_normalizers["masked_lm_weight"] + losses.MASKED_LM_DENOMINATOR_EPSILON
  sums = dict(mlm_correct=mlm["correct"], mlm_weight=mlm["weight"],
              nsp_correct=nsp["correct"], examples=nsp["examples"])
  return mlm["nll"], denominator, nsp["nll"] / instances, sums


def replica_loss(outputs, batch, global_normalizers, examples_per_update):
  """This replica's share of the loss of one update, and its metric sums.

  The shares of all replicas and micro-batches add up to the original's loss on the whole
  global batch: sum(w * nll) / (sum(w) + 1e-5) with sums over the global batch, plus the mean
  next-sentence cross-entropy over the global batch (over its instances, for packed rows).
  """
  mlm_nll, denominator, nsp_loss, sums = _loss_terms(outputs, batch, global_normalizers,
                                                     examples_per_update)
  return mlm_nll / denominator + nsp_loss, sums


SUM_NAMES = ("mlm_correct", "mlm_weight", "nsp_correct", "examples")


def train_metrics(totals: Mapping[str, float], good_steps: int) -> Dict[str, float]:
  return dict(
      loss=totals["loss"] / good_steps,
      masked_lm_accuracy=totals["mlm_correct"] / max(totals["mlm_weight"], 1e-5),
      next_sentence_accuracy=totals["nsp_correct"] / max(totals["examples"], 1))


def eval_sums(outputs, batch):
  mlm = losses.masked_lm_sums(outputs["masked_lm_logits"], batch["masked_lm_ids"],
                              batch["masked_lm_weights"])
  nsp = _next_sentence_sums(outputs, batch)
  return dict(mlm_nll=mlm["nll"], mlm_weight=mlm["weight"], mlm_correct=mlm["correct"],
              nsp_nll=nsp["nll"], nsp_correct=nsp["correct"], examples=nsp["examples"])


def eval_metrics_from_sums(batch_sums: List[Mapping[str, Any]]) -> Dict[str, float]:
  """The original's eval metrics from per-batch sums (a list of dicts of eval_sums results).

  masked_lm_accuracy and masked_lm_loss are weighted by masked_lm_weights over the whole eval
  set and the next-sentence metrics averaged over all examples (the original's tf.metrics in
  run_pretraining.py:model_fn's metric_fn); `loss` is the mean over batches of the batch loss
  (as the Estimator reports it).
  """
  total = evaluation.sum_batches(batch_sums)
  eps = losses.MASKED_LM_DENOMINATOR_EPSILON
  batch_losses = [float(b["mlm_nll"]) / (float(b["mlm_weight"]) + eps)
                  + float(b["nsp_nll"]) / float(b["examples"]) for b in batch_sums]
  return dict(
      masked_lm_accuracy=total["mlm_correct"] / max(total["mlm_weight"], eps),
      masked_lm_loss=total["mlm_nll"] / max(total["mlm_weight"], eps),
      next_sentence_accuracy=total["nsp_correct"] / total["examples"],
      next_sentence_loss=total["nsp_nll"] / total["examples"],
      loss=float(np.mean(batch_losses)))


TASK = loop.Task(model_inputs=model_inputs, normalizers=normalizers, replica_loss=replica_loss,
                 sum_names=SUM_NAMES, train_metrics=train_metrics, eval_sums=eval_sums,
                 eval_results=eval_metrics_from_sums)


def distilled_task(teacher_outputs, temperature: float, alpha: float,
                   cosine_weight: float) -> loop.Task:
  """TASK learning from a teacher (training/distillation/pretraining_teacher.py): alpha x the
  masked LM + (1 - alpha) x the soft masked LM at temperature T (scaled by T^2) + cosine_weight
  x (1 - cos) of the last hidden states at the masked positions, each summed over the masked
  positions and divided by the global batch's masked-LM weight as the masked LM is, + the next
  sentence as in TASK. The metric sums stay TASK's.

  Args:
    teacher_outputs: batch -> the teacher's outputs on the same batch (masked_lm_logits, and
      masked_lm_hidden when cosine_weight > 0).
    temperature: T > 0.
    alpha: the masked LM's weight in [0, 1].
    cosine_weight: >= 0; the student model must then output masked_lm_hidden.
  """

  def distilled_loss(outputs, batch, global_normalizers, examples_per_update):
    teacher = teacher_outputs(batch)
    mlm_nll, denominator, nsp_loss, sums = _loss_terms(outputs, batch, global_normalizers,
                                                       examples_per_update)
    weights = batch["masked_lm_weights"]
    soft = tf.reduce_sum(distill_predictions.masked_lm_soft_loss(
        outputs["masked_lm_logits"], teacher["masked_lm_logits"], weights, temperature))
    masked_lm = alpha * mlm_nll + (1.0 - alpha) * soft
    if cosine_weight:
      # cosine_loss weighs its positions by a mask: the masked-LM weights are that mask here.
      cosine = distill_predictions.cosine_loss(outputs[MASKED_LM_HIDDEN],
                                               teacher[MASKED_LM_HIDDEN],
                                               weights)
      masked_lm += cosine_weight * tf.reduce_sum(cosine)
    return masked_lm / denominator + nsp_loss, sums

  return TASK._replace(replica_loss=distilled_loss)


# === The run ===


def packing_mode(settings: PretrainingSettings) -> packed_rows.PackingMode:
  """--packing with auto made concrete: none (see PretrainingSettings.packing)."""
  mode = settings.packing_mode
  return packed_rows.PackingMode(row_packing.NONE) if mode.auto else mode


def training_packing(settings: PretrainingSettings, per_replica_batch: int
                     ) -> Optional[packed_rows.Packing]:
  """The packing of training batches (None: unpacked). Static packing's rows per replica batch
  come from the lengths of the first training file's instances (row_packing.static_rows),
  logged."""
  mode = packing_mode(settings)
  if not mode.packed:
    return None
  if mode.exact:
    logging.info("  Packed rows (exact): %d instances per replica batch in the fewest rows of "
                 "%d (row counts %s), %d masked-LM slots per row", per_replica_batch,
                 settings.max_seq_length,
                 ",".join(map(str, row_packing.row_ladder(per_replica_batch))),
                 input_pipeline.predictions_per_row(settings.max_predictions_per_seq))
    return packed_rows.Packing(mode.value)
  first = record_files.expand_file_patterns(settings.input_file)[0]
  counts = bucketing.length_counts(first, settings.max_seq_length)
  rows = row_packing.static_rows(counts, per_replica_batch, settings.max_seq_length)
  if rows % settings.cpu_towers:
    raise TrainingError(
        f"--cpu_towers={settings.cpu_towers} splits a batch's rows into equal towers, but "
        f"--packing=static fitted {rows} rows per replica batch to {first}: choose a "
        "--train_batch_size or --cpu_towers for which they divide")
  logging.info("  Packed rows (static): %d rows of %d per replica batch, about %d instances "
               "on average (fitted to %s), %d masked-LM slots per row", rows,
               settings.max_seq_length, per_replica_batch, first,
               input_pipeline.predictions_per_row(settings.max_predictions_per_seq))
  return packed_rows.Packing(mode.value, rows=rows)


def _train_dataset_fn(settings: PretrainingSettings, masking, num_replicas: int = 1,
                      vocab_size: Optional[int] = None):
  shares = distribution.BatchShares(settings.train_batch_size, num_replicas,
                                    settings.gradient_accumulation_steps)
  packing = training_packing(settings, shares.micro_batch_per_replica)

  def dataset_fn(ctx):
    dataset = input_pipeline.pretraining_dataset(
        settings.input_file, settings.max_seq_length, settings.max_predictions_per_seq,
        batch_size=shares.micro_batch, is_training=True, input_context=ctx, seed=settings.seed,
        shuffle_buffer_size=settings.shuffle_buffer_size, dynamic_masking=masking,
        packing=packing, vocab_size=vocab_size)
    if settings.gradient_accumulation_steps > 1:
      # Packed micro-batches may differ in rows (exact packing): padded to the update's most,
      # with empty rows (weight 0).
      dataset = (dataset.padded_batch if packing is not None else dataset.batch)(
          settings.gradient_accumulation_steps, drop_remainder=True)
    logging.info("*** Features (per replica) ***")
    for name, spec in dataset.element_spec.items():
      logging.info("  name = %s, shape = %s", name, spec.shape)
    return dataset
  return dataset_fn


def _eval_dataset_fn(settings: PretrainingSettings, vocab_size: Optional[int] = None):
  """The eval data's dataset_fn; each input pipeline's dataset is built once (its files
  found and their metadata read once) and read again from a new iterator by every
  evaluation of the run."""
  datasets = {}

  def dataset_fn(ctx):
    key = (ctx.num_input_pipelines, ctx.input_pipeline_id)
    if key not in datasets:
      datasets[key] = input_pipeline.pretraining_dataset(
          settings.eval_input_file or settings.input_file, settings.max_seq_length,
          settings.max_predictions_per_seq, batch_size=settings.eval_batch_size,
          is_training=False, input_context=ctx, repeat=True,
          packing=(None if not packing_mode(settings).packed
                   else packed_rows.Packing(row_packing.EXACT)), vocab_size=vocab_size)
    return datasets[key]
  return dataset_fn


def _check_data(settings: PretrainingSettings, config: BertConfig, pattern: str,
                flag: str) -> Optional[Dict[str, Any]]:
  try:
    files = record_files.expand_file_patterns(pattern, flag_name=flag)
    metadata = record_files.check_input_metadata(
        files, settings.max_seq_length, settings.max_predictions_per_seq,
        vocab_size=config.vocab_size, do_lower_case=settings.do_lower_case)
    record_files.check_no_unfinished_commit(files, flag)
    # Every file's first record: no empty file (the pipeline would spin on it), no unreadable
    # one, the lengths the flags promise and token ids within the config's vocab (which
    # catches files without metadata, alone or among files with it).
    lengths = dict(zip(
        record_schema.feature_names(False).values(),
        record_schema.feature_lengths(settings.max_seq_length,
                                      settings.max_predictions_per_seq).values()))
    record_files.check_record_files(
        files, record_files.detect_compression(files, metadata), flag, lengths,
        vocab_size=config.vocab_size)
    _check_vocab(settings, metadata, files[0])
    data_vocab_size = (metadata or {}).get("vocab_size")
    if isinstance(data_vocab_size, int) and data_vocab_size < config.vocab_size:
      logging.warning(
          "The config's vocab_size is %d but the %s data was made with a vocabulary of %d "
          "tokens: %d rows of the embedding table and of the masked-LM output are never used; "
          "set vocab_size to %d in --bert_config_file unless the padding is meant",
          config.vocab_size, flag, data_vocab_size, config.vocab_size - data_vocab_size,
          data_vocab_size)
    return metadata
  except (record_files.InputError, record_schema.MetadataError) as e:
    # Both errors already name the flag and the file.
    raise TrainingError(str(e)) from None


def _check_vocab(settings: PretrainingSettings, metadata: Optional[Mapping[str, Any]],
                 first_file: str) -> None:
  """The --vocab_file (copied into the exports, whose tokenizer it becomes, and recorded in
  output_dir) must be the vocab the data was tokenized with (provenance.check_tokenizer against
  the data's metadata)."""
  try:
    provenance.check_tokenizer(settings.vocab_file, settings.do_lower_case,
                               data_metadata=metadata,
                               data_source=record_schema.metadata_path(first_file),
                               allow_mismatch=settings.allow_tokenizer_mismatch)
  except provenance.TokenizerMismatchError as e:
    raise record_files.InputError(str(e)) from None


def run_pretraining(config: BertConfig, settings: PretrainingSettings,
                    strategy: Optional[tf.distribute.Strategy] = None,
                    exporter: Optional[exporting.Exporter] = None) -> Dict[str, Any]:
  """Trains and/or evaluates a BERT pretraining model; resumes from output_dir if possible.

  Args:
    config: the model config.
    settings: the run (see PretrainingSettings).
    strategy: a tf.distribute strategy (distribution.select_strategy()); None uses the default.
    exporter: the export (model.exporting's convention), called by the chief with (model,
      config, settings, the data's metadata, version=step) at the end of training
      (settings.export_at_end) and at every checkpoint (settings.export_every_checkpoint); it
      writes exporting.export_path(output_dir, exporter.model_name, step). None exports
      nothing (the command passes serving.saved_model.EXPORTER).

  Returns:
    A dict with global_step, model (the trained keras.Model), the last logged train metrics
    (train_loss, train_masked_lm_accuracy, train_next_sentence_accuracy, learning_rate,
    examples_per_second), the eval results (when evaluated) and export_dir (when exported).

  Raises:
    TrainingError: bad settings or data, an unreadable init_checkpoint, or a non-finite
      loss.
  """
  strategy = strategy or distribution.select_strategy()
  settings.check(strategy.num_replicas_in_sync)
  distribution.check_cpu_only(strategy, settings.cpu_towers)
  if settings.max_seq_length > config.max_position_embeddings:
    raise TrainingError(f"--max_seq_length={settings.max_seq_length} is more than the "
                             f"config's max_position_embeddings="
                             f"{config.max_position_embeddings}")
  metadata = _check_data(settings, config, settings.input_file, "input_file")
  if settings.do_eval and settings.eval_input_file:
    _check_data(settings, config, settings.eval_input_file, "eval_input_file")
  teacher_config = None
  if settings.teacher:
    first = record_files.expand_file_patterns(settings.input_file)[0]
    teacher_config = pretraining_teacher.check_teacher(settings, config, metadata,
                                                       record_schema.metadata_path(first))
  chief = distribution.is_chief(strategy)
  new_folder = chief and not io.exists(settings.output_dir)
  try:
    with run_folder.run_directory_lock(settings.output_dir, chief, "run_pretraining"):
      # Nothing is written to output_dir before a resume is known to fit its checkpoints.
      run_folder.check_resume_compatible(settings.output_dir, config, settings)
      before = set(io.listdir(settings.output_dir))
      try:
        return _start(config, settings, strategy, chief, metadata, exporter, teacher_config)
      except BaseException:
        if chief:
          run_folder.remove_failed_run_files(settings.output_dir, before)
        raise
  finally:
    if new_folder:
      run_folder.remove_if_empty(settings.output_dir)  # made here, and left empty by a failure


def _start(config, settings, strategy, chief, metadata, exporter, teacher_config=None):
  """Records the run in output_dir (the chief), then trains and evaluates."""
  io.makedirs(settings.output_dir)
  if chief:
    run_folder.record_run(settings.output_dir, config, settings)
    if metadata is not None:
      # The data's tokenizer (casing, vocab checksum), checked by fine-tuning commands that
      # start from this run's checkpoints.
      io.write_text(io.join(settings.output_dir, DATA_METADATA_FILE),
                    json.dumps(dict(metadata), indent=2) + "\n")
    # The vocab of the data (the records' metadata names it) or --vocab_file, as the folder's
    # vocab.txt: export and convert_checkpoint take the folder's tokenizer from it.
    vocab = settings.vocab_file or provenance.data_vocab(metadata)
    if vocab:
      provenance.record_vocab(settings.output_dir, vocab)
  if settings.seed is not None:
    keras.utils.set_random_seed(settings.seed)
  with distribution.dtype_policy(settings.mixed_precision):
    return _run(config, settings, strategy, chief, metadata, exporter, teacher_config)


class _Teaching:
  """A distilled run's teacher: its task (the loss reads the teacher, loaded after the student
  was built, so that the student starts from the weights a run without --teacher starts
  from), then the loaded teacher and its eval results."""

  def __init__(self, settings, config, teacher_config):
    self.settings, self.config, self.teacher_config = settings, config, teacher_config
    self.teacher: Optional[pretraining_teacher.PretrainingTeacher] = None
    self.cosine_weight = pretraining_teacher.cosine_weight(settings, teacher_config, config)
    self.results: Dict[str, float] = {}

  def task(self) -> loop.Task:
    return distilled_task(lambda batch: self.teacher.outputs(model_inputs)(batch),
                          self.settings.distill_temperature, self.settings.distill_alpha,
                          self.cosine_weight)

  def load(self, strategy, packed: bool, eval_batches=None) -> None:
    """Loads the teacher; with eval_batches (a fresh iterator), evaluates it first."""
    self.teacher = pretraining_teacher.load_teacher(self.settings, self.teacher_config,
                                                    self.config, strategy, packed)
    if eval_batches is not None:
      logging.info("***** The teacher's results (%s) *****", self.settings.teacher)
      trainer = loop.Trainer(strategy, self.teacher.model, None, TASK,
                             self.settings.train_batch_size)
      results = evaluation.evaluate(trainer, eval_batches, self.settings.max_eval_steps, 0,
                                    None, False, results_file=False)
      self.results = {f"teacher_{key}": value for key, value in results.items()
                      if key != "global_step"}


def _start_model(config, settings, strategy, chief, teacher_config):
  """The run (loop.prepare_run) with its weights (resumed, or --init_checkpoint's) and, with
  --teacher, its _Teaching (None otherwise)."""
  teaching = (_Teaching(settings, config, teacher_config) if teacher_config is not None
              else None)
  # The last layer runs only at [CLS] and the masked positions: same losses, fewer FLOPs.
  packed = packing_mode(settings).packed
  hidden = teaching is not None and teaching.cosine_weight > 0
  run = loop.prepare_run(strategy, lambda: build_pretraining_model(
      config, prune_last_layer=True, packed=packed, masked_hidden=hidden),
                         teaching.task() if teaching else TASK, settings,
                         settings.num_train_steps, settings.num_warmup_steps, chief,
                         towers=settings.cpu_towers)
  restored = set()
  if run.checkpoint.resumed_from is None:
    if settings.init_checkpoint:
      restored = loop.load_init_checkpoint(run.model, settings.init_checkpoint,
                                           settings.init_layers)
    elif settings.do_eval and not settings.do_train:
      logging.warning("Evaluating randomly initialised weights: %s holds no checkpoint and no "
                      "--init_checkpoint was given", settings.output_dir)
  loop.log_variables(run.model, restored)
  return run, teaching


def _run(config, settings, strategy, chief, metadata, exporter, teacher_config=None):
  masking = None
  if settings.dynamic_masking:
    vocab = tokenization.load_vocab(settings.vocab_file)
    masking = remasking.DynamicMasking.from_vocab(
        vocab, seed=settings.seed if settings.seed is not None else 12345)
  packed = packing_mode(settings).packed
  run, teaching = _start_model(config, settings, strategy, chief, teacher_config)
  model, global_step, trainer, state = run.model, run.global_step, run.trainer, run.checkpoint

  def export(step):
    export_dir = exporting.export_path(settings.output_dir, exporter.model_name, step)
    if io.exists(export_dir):
      # A resumed run that lost the checkpoint of this step trained it again.
      logging.warning("Replacing the existing export %s with this run's weights of step %d",
                      export_dir, step)
    return exporter.export(model, config, settings, metadata, version=step)

  result = run_result.RunResult(model=model)
  # One eval dataset and one traced eval step for every evaluation of the run; each
  # evaluation reads the same batches from a new iterator.
  evaluations: Dict[int, Dict[str, float]] = {}
  eval_dataset_fn = _eval_dataset_fn(settings, config.vocab_size)

  def evaluate(step, final=False):
    with _naming_corrupt_files(settings.eval_input_file or settings.input_file,
                               "eval_input_file" if settings.eval_input_file else "input_file"):
      batches = distribution.data_iterator(strategy, eval_dataset_fn)
      evaluations[step] = evaluation.evaluate(trainer, batches, settings.max_eval_steps, step,
                                        settings.output_dir, chief, results_file=final)
    return evaluations[step]

  if teaching is not None:
    teaching.load(strategy, packed, eval_batches=distribution.data_iterator(
        strategy, eval_dataset_fn) if settings.do_eval else None)
  if settings.do_train:
    # Resume by skip: with --seed the resumed run sees the batches an uninterrupted one would.
    iterator = distribution.resumed_iterator(
        strategy, _train_dataset_fn(settings, masking, strategy.num_replicas_in_sync,
                                    config.vocab_size),
        global_step)
    _log_training(settings, strategy, int(global_step.numpy()))
    on_checkpoint = (export if settings.export_every_checkpoint and chief and exporter
                     else None)
    with _naming_corrupt_files(settings.input_file, "input_file"):
      result.update(loop.train(
          trainer, iterator, global_step, state.manager, settings.num_train_steps,
          settings.iterations_per_loop, settings.save_checkpoints_steps, settings.output_dir,
          chief, on_checkpoint=on_checkpoint, eval_every_n_steps=settings.eval_every_n_steps,
          on_eval=evaluate if settings.eval_every_n_steps else None))
  result["global_step"] = int(global_step.numpy())
  if evaluations:
    result["evaluations"] = evaluations
  if settings.do_eval:
    step = result["global_step"]
    if step in evaluations:
      # The last evaluation during training was of these weights, on the same batches.
      evaluation.report_eval_results(evaluations[step], settings.output_dir, chief)
      result.update(evaluations[step])
    else:
      result.update(evaluate(step, final=True))
    if teaching is not None and teaching.results:  # logged first, before training
      result.update(teaching.results)
      if chief:
        evaluation.write_eval_results(io.join(settings.output_dir, evaluation.EVAL_RESULTS_FILE),
                                      dict(evaluations[step], **teaching.results))
  if settings.do_train and settings.export_at_end and chief and exporter is not None:
    result["export_dir"] = export(result["global_step"])
  if packed:  # callers get the unpacked model (the encoder's inputs) with the trained weights
    result.copy_model(lambda: _unpacked_copy(model, config), strategy)  # run_result.py
  return result


def _unpacked_copy(model, config):
  """build_pretraining_model(config), holding `model`'s weights (under the caller's strategy
  scope and dtype policy)."""
  copy = build_pretraining_model(config, prune_last_layer=True)
  checkpoints.set_original_weights(copy, checkpoints.get_original_weights(model),
                                   source=model.name)
  return copy


@contextlib.contextmanager
def _naming_corrupt_files(pattern: str, flag: str):
  """A DataLossError while reading records (a corrupt or truncated file; TF's message names
  neither file nor flag) becomes a TrainingError naming the file, found by reading them all."""
  try:
    yield
  except tf.errors.DataLossError as e:
    files = record_files.expand_file_patterns(pattern, flag_name=flag)
    metadata = record_files.read_input_metadata(files)
    found = record_files.first_unreadable_file(
        files, record_files.detect_compression(files, metadata))
    if found is None:
      raise
    path, reason = found
    raise TrainingError(
        f"--{flag}: {path} is corrupt or truncated ({reason}); check it with: python "
        f"data_prep/inspect_records.py {path}") from e


def _log_training(settings, strategy, step):
  shares = distribution.BatchShares(settings.train_batch_size, strategy.num_replicas_in_sync,
                                    settings.gradient_accumulation_steps)
  logging.info("Training: global batch %d, %d replica(s), per-replica batch %d%s, "
               "%d steps (from step %d), %s, mixed precision %s",
               settings.train_batch_size, shares.replicas, shares.per_replica,
               (f" in {settings.gradient_accumulation_steps} micro-batches of "
                f"{shares.micro_batch_per_replica}"
                if settings.gradient_accumulation_steps > 1 else ""),
               settings.num_train_steps, step,
               settings.optimizer + (" with Adam's bias correction"
                                     if settings.adam_bias_correction and
                                     settings.optimizer == "adamw" else ""),
               settings.mixed_precision)
