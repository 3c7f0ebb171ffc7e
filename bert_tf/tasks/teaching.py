"""The teacher of a distilled fine-tuning run (--teacher): checked, loaded frozen, evaluated first.

A run with --teacher=PATH trains its model (the student: --bert_config_file, --init_checkpoint)
on a mix of the task's own loss and the teacher's soft targets (training/distillation's losses,
weighted by --distill_alpha, at --distill_temperature). The teacher is a model fine-tuned on the
same task: one of our run folders (or a checkpoint in it), or any checkpoint the converters read
with its head and a record of it (task_info.json, a Hugging Face config.json).

  check_teacher  before anything is written: the task can be taught, and the teacher's record
                 agrees with the student's (head kind, labels and their order, vocab md5,
                 casing, max_seq_length; training.distillation.teacher), one line per problem
  load_teacher   its config (bert_config.json or config.json beside the weights) and weights,
                 strictly (a teacher missing its head's weights is refused), built as the
                 task builds its model (packed when the student's batches are; from zero
                 initial values, which the strict load overwrites all of), frozen,
                 under the run's strategy; it then runs inside the training step in inference
                 mode (training=False), on the student's own batches
  intermediate_plan  the losses inside the encoder the flags turn on (--distill_hidden_weight,
                 --distill_attention_weight, --distill_value_weight), checked against both
                 configs before anything is written (training/distillation/features.py)
  evaluate_teacher  its dev results, before training, with the task's own evaluation: in
                 output_dir/teacher/ (its eval results and predictions), logged, and added
                 to the student's results files as teacher_<key> (e.g. teacher_eval_accuracy)
  cache_stamp, check_cache_stamp, cached_record_spec, cached_batch_outputs,
  write_cached_outputs  --cache_teacher: the teacher's outputs written once into the training
                 records in the task's layout (CACHE_LAYOUTS: per example, or per position,
                 the real positions only or every position), stamped, read back per batch

The teacher is never part of the student's checkpoint or export: a resumed run loads it again,
and the student exports as any fine-tuned model.
"""

import dataclasses
import json
import os
import re
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model import layers
from bert_tf.model import provenance
from bert_tf.training import distillation
from bert_tf.training import evaluation
from bert_tf.training import run_folder
from bert_tf.training.distillation import features
from bert_tf.training.distillation import predictions
from bert_tf.training.distillation import teacher as teacher_lib
from bert_tf.training.errors import TrainingError

TEACHER_DIR = "teacher"
PREFIX = "teacher_"
# --cache_teacher: what the teacher's outputs in the training records were computed with.
CACHE_STAMP_FILE = "teacher_cache.json"
# The per-example weight of the records of a task with cached outputs (0: a batch's padding).
REAL_EXAMPLE = "is_real_example"


@dataclasses.dataclass(frozen=True)
class Teacher:
  """A loaded teacher: where it came from, its config and its frozen Keras model."""
  path: str
  config: BertConfig
  model: keras.Model

  def outputs(self, model_inputs: Callable[[Mapping[str, tf.Tensor]], Dict[str, tf.Tensor]]
              ) -> Callable[[Mapping[str, tf.Tensor]], Dict[str, tf.Tensor]]:
    """batch -> the teacher's outputs on it (predictions.frozen_outputs)."""
    return predictions.frozen_outputs(self.model, model_inputs)


def _flag(settings) -> str:
  return f"{teacher_lib.TEACHER_FLAG}={settings.teacher}"


# Where a fine-tuning run's recorded facts come from, for the guards' messages.
_STUDENT_SOURCES = dict(vocab_md5="--vocab_file", do_lower_case="--do_lower_case",
                        max_seq_length="--max_seq_length", labels="the run's labels",
                        regression="the run's labels", head="the run's command",
                        pair="the run's training data",
                        version_2_with_negative="--version_2_with_negative",
                        document_context="--document_context")


def check_teacher(settings, info: Mapping[str, Any], can_teach: bool, program: str) -> None:
  """Refuses a teacher before anything is written: a task without distillation, an unreadable
  teacher, or one whose record contradicts the student's run (info: its task_info).

  Raises:
    TrainingError: one line naming --teacher and every problem.
  """
  if not settings.teacher:
    return
  if not can_teach:
    raise TrainingError(f"{_flag(settings)}: {program} has no distillation loss; --teacher "
                        "teaches run_classifier, run_ner and run_squad")
  if provenance.folder_of(settings.teacher).rstrip("/") == settings.output_dir.rstrip("/"):
    raise TrainingError(f"{_flag(settings)} is the run's own --output_dir: the teacher must be "
                        "another run's model")
  if not io.exists(settings.teacher) and not io.exists(f"{settings.teacher}.index"):
    raise TrainingError(f"{_flag(settings)}: no such folder, file or checkpoint")
  if io.isdir(settings.teacher) and not io.listdir(settings.teacher):
    raise TrainingError(f"{_flag(settings)} is an empty folder: give a fine-tuned model's")
  try:
    teacher = teacher_lib.read_record(settings.teacher)
  except (FileNotFoundError, ValueError) as e:
    raise TrainingError(f"{_flag(settings)}: {e}") from None
  student = teacher_lib.record_of_task_info(
      info, io.join(settings.output_dir, provenance.TASK_INFO_FILE), settings.output_dir)
  # Named by where the run's facts come from: its task_info.json is written after the checks.
  student = dataclasses.replace(student, sources={
      key: _STUDENT_SOURCES.get(key, source) for key, source in student.sources.items()})
  try:
    teacher_lib.check_teacher(teacher, student)
  except teacher_lib.TeacherMismatchError as e:
    raise TrainingError(str(e)) from None


def teacher_config(settings) -> BertConfig:
  """The teacher's config, from beside its weights, checked against the run's max_seq_length."""
  try:
    config = checkpoints.config_beside(checkpoints.resolve_checkpoint(settings.teacher))
  except (FileNotFoundError, ValueError) as e:
    raise TrainingError(f"{_flag(settings)}: {e}") from None
  if config.max_position_embeddings < settings.max_seq_length:
    raise TrainingError(f"{_flag(settings)} reads at most {config.max_position_embeddings} "
                        f"positions but --max_seq_length={settings.max_seq_length}")
  return config


def load_teacher(settings, build_model: Callable[[BertConfig], keras.Model],
                 strategy: tf.distribute.Strategy) -> Teacher:
  """The teacher's model (build_model(its config), the task's model), its weights loaded
  strictly under the strategy and frozen.

  Raises:
    TrainingError: no config beside it, weights it cannot read or that miss a variable of the
      task's model (a teacher without its fine-tuned head).
  """
  config = teacher_config(settings)
  with strategy.scope():
    with layers.zero_initial_values():  # every weight is loaded strictly below
      model = build_model(config)
    try:
      checkpoints.load_weights(model, settings.teacher, strict=True)
    # IndexError: a checkpoint whose data file was cut short
    except (FileNotFoundError, ValueError, KeyError, IndexError, tf.errors.OpError) as e:
      reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise TrainingError(f"{_flag(settings)}: cannot load it as the task's model "
                          f"({reason})") from None
  model.trainable = False
  logging.info("Teacher %s: %d layers, hidden size %d, frozen (the student: its own config)",
               settings.teacher, config.num_hidden_layers, config.hidden_size)
  return Teacher(settings.teacher, config, model)


def evaluate_teacher(evaluate: Callable[[Any, Dict[str, Any]], Dict[str, Any]], state,
                     teacher_state) -> Dict[str, Any]:
  """The teacher's results with the task's evaluate (teacher_state: the run's state with the
  teacher's trainer and output_dir/teacher), logged first; teacher_-prefixed scalars."""
  results = evaluate(teacher_state, {"global_step": teacher_step(state.settings.teacher)})
  prefixed = {f"{PREFIX}{key}": value for key, value in _scalars(results).items()}
  if not prefixed:
    logging.info("The teacher (%s) has no results: the run neither evaluates nor predicts",
                 state.settings.teacher)
    return {}
  logging.info("***** The teacher's results (%s) *****", state.settings.teacher)
  for key in sorted(prefixed):
    logging.info("  %s = %s", key, prefixed[key])
  return prefixed


def teacher_step(path: str) -> int:
  """The training step of the teacher's checkpoint: the number its name ends with (a run's
  ckpt-N, the original's model.ckpt-N), else 0 (a Hugging Face folder records none)."""
  try:
    found = re.search(r"-(\d+)$", checkpoints.resolve_checkpoint(path))
  except FileNotFoundError:
    return 0
  return int(found.group(1)) if found else 0


def _scalars(results: Mapping[str, Any], prefix: str = "") -> Dict[str, float]:
  """The scalar entries of a task's results, nested dicts flattened as <key>_<entry>."""
  flat = {}
  for key, value in results.items():
    if key == "global_step":
      continue
    if isinstance(value, Mapping):
      flat.update(_scalars(value, f"{prefix}{key}_"))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
      flat[f"{prefix}{key}"] = float(value)
  return flat


def intermediate_plan(settings, config: BertConfig) -> Optional[features.Plan]:
  """The intermediate distillation losses the flags turn on (None: none), checked against
  both models' configs and logged.

  Raises:
    TrainingError: one line naming the flag (a layer map or relation heads the two models
      cannot have).
  """
  if not settings.teacher or not any(
      getattr(settings, name) > 0 for name in distillation.INTERMEDIATE_WEIGHT_FLAGS):
    return None
  teacher = teacher_config(settings)
  try:
    plan = features.plan(settings, config, teacher)
  except ValueError as e:
    raise TrainingError(str(e)) from None
  logging.info("%s", features.describe(plan, config, teacher))
  return plan


# run_settings.json's entry for the hidden-state projection the run's checkpoints hold:
# [layer pairs, student width, teacher width], or None (no projection).
PROJECTION_RECORD = "distill_projection"


def projection_record(plan: Optional[features.Plan]) -> Dict[str, Any]:
  """The run_settings.json entry that says which projection a run trains (None: none)."""
  projected = plan is not None and plan.projected
  return {PROJECTION_RECORD: [len(plan.layer_map), plan.student_width, plan.teacher_width]
          if projected else None}


def check_resumed_projection(settings, resuming: bool, plan: Optional[features.Plan]) -> None:
  """Refuses, before anything is written, to resume checkpoints trained with another
  hidden-state projection (other layer pairs or widths, or with and without one): their
  variables could not be restored into this run's.

  Raises:
    TrainingError: naming the flags and both projections.
  """
  if not (settings.do_train and resuming):
    return
  path = io.join(settings.output_dir, run_folder.RUN_SETTINGS_FILE)
  recorded = io.read_json_object(path)
  if recorded is None or PROJECTION_RECORD not in recorded:
    return
  current = projection_record(plan)[PROJECTION_RECORD]
  if recorded[PROJECTION_RECORD] == current:
    return

  def describe(value):
    return ("none" if value is None else
            f"{value[0]} layer pair(s), width {value[1]} to {value[2]}")

  raise TrainingError(
      f"--distill_hidden_weight, --distill_layer_map, --teacher: the checkpoints in "
      f"{settings.output_dir} were trained with a hidden-state projection of "
      f"{describe(recorded[PROJECTION_RECORD])}, this run's is {describe(current)}; resume with "
      f"the flags {path} records or choose another --output_dir")


def teacher_dir(output_dir: str) -> str:
  return io.join(output_dir, TEACHER_DIR)


def merge_results_files(output_dir: str, names: Sequence[str]) -> None:
  """Adds the teacher's entries (output_dir/teacher/<name>) to the student's results file
  output_dir/<name>, each as teacher_<key>: `key = value` text files, or JSON objects."""
  for name in names:
    mine, theirs = io.join(output_dir, name), io.join(teacher_dir(output_dir), name)
    if not (io.exists(mine) and io.exists(theirs)):
      continue
    if name.endswith(".json"):
      student, teacher = json.loads(io.read_text(mine)), json.loads(io.read_text(theirs))
      student.update({f"{PREFIX}{k}": v for k, v in teacher.items()})
      io.write_text(mine, json.dumps(student, indent=2) + "\n")
    else:  # the values as written (global_step stays an integer)
      student = _text_results(mine)
      student.update({f"{PREFIX}{k}": v for k, v in _text_results(theirs).items()
                      if k != "global_step"})
      evaluation.write_eval_results(mine, student)


def _text_results(path: str) -> Dict[str, str]:
  """A `key = value` results file's entries, the values as written."""
  pairs = (line.split(" = ", 1) for line in io.read_text(path).splitlines() if " = " in line)
  return {key: value for key, value in pairs}


# === --cache_teacher: the teacher's outputs written once into the training records ===


def cache_stamp(settings, info: Mapping[str, Any]) -> Dict[str, Any]:
  """What cached teacher outputs depend on: the teacher, the vocab, max_seq_length, the labels
  and the head kind."""
  teacher = os.path.abspath(settings.teacher) if io.is_local(settings.teacher) else \
      settings.teacher  # the same teacher however the path is written
  return dict(teacher=teacher, vocab_md5=info.get("vocab_md5"),
              max_seq_length=settings.max_seq_length, labels=info.get("labels"),
              head=info.get("head"))


def check_cache_stamp(record_dir: str, stamp: Mapping[str, Any]) -> None:
  """Refuses the teacher outputs cached in record_dir by another teacher or for other inputs.

  Raises:
    TrainingError: one line naming the cache and both stamps' differing entries.
  """
  path = io.join(record_dir, CACHE_STAMP_FILE)
  if not io.exists(path):
    return
  cached = json.loads(io.read_text(path))
  differ = sorted(key for key in stamp if cached.get(key) != stamp[key])
  if differ:
    raise TrainingError(
        f"--cache_teacher: {path} holds teacher outputs for "
        + ", ".join(f"{key}={cached.get(key)}" for key in differ) + " but this run's are "
        + ", ".join(f"{key}={stamp[key]}" for key in differ)
        + "; use another --output_dir or remove the cache")


# How a task's cached outputs sit in its training records (FineTuningTask.cache_layout):
#   PER_EXAMPLE     one vector per record (a classifier's logits [C])
#   REAL_POSITIONS  one vector per position, for the record's real positions only (a tagger's
#                   logits: n x C values for a window of n real positions; its loss counts no
#                   padding position), read back as [L, C] with 0 past the window's end
#   EVERY_POSITION  one value per position, padding included (SQuAD's start and end logits
#                   [L]: an unpacked window's softmax runs over all its positions, as the
#                   original's loss, so the teacher's logits at padding positions count too)
# The per-position layouts are per-position features of the records: length buckets cut them
# and packed rows pack them exactly as they cut and pack the inputs.
PER_EXAMPLE = "example"
REAL_POSITIONS = "real_positions"
EVERY_POSITION = "every_position"
CACHE_LAYOUTS = (PER_EXAMPLE, REAL_POSITIONS, EVERY_POSITION)


def cached_record_spec(layout: str, shapes: Mapping[str, Sequence[int]]) -> Dict[str, Any]:
  """The training records' spec entries (input_pipeline.RecordSpec) of cached outputs:
  {output: the shape of one record's values} (per example: (C,); per position: (L,) or
  (L, C)) as teacher_<output> features of that layout."""
  spec = {}
  for name, shape in shapes.items():
    shape = tuple(int(d) for d in shape)
    if layout == PER_EXAMPLE:  # [1, C]: never taken for a per-position feature
      spec[f"{PREFIX}{name}"] = ((1, int(np.prod(shape))), "float32")
    elif layout == REAL_POSITIONS:
      spec[f"{PREFIX}{name}"] = ((None,) + shape[1:], "float32")
    else:
      spec[f"{PREFIX}{name}"] = (shape, "float32")
  return spec


def cached_batch_outputs(layout: str, shapes: Mapping[str, Sequence[int]],
                         batch: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  """The teacher's outputs of a training batch read from its cached features, shaped as the
  teacher's model gives them (per example [B, C]; per position as the batch's rows: cut to
  its length bucket, or packed, [B, W] or [B, W, C])."""
  if layout == PER_EXAMPLE:
    return {name: tf.reshape(batch[f"{PREFIX}{name}"], [-1, int(np.prod(shape))])
            for name, shape in shapes.items()}
  return {name: batch[f"{PREFIX}{name}"] for name in shapes}


def _real_length(example: tf.train.Example) -> int:
  """One past the last real position of a record (its input_mask)."""
  mask = example.features.feature["input_mask"].int64_list.value
  return max((i + 1 for i, value in enumerate(mask) if value), default=0)


def write_cached_outputs(records: str, outputs: Mapping[str, Any], record_dir: str,
                         stamp: Mapping[str, Any], layout: str = PER_EXAMPLE) -> None:
  """Rewrites the training records with the teacher's outputs (one float feature teacher_<name>
  per output, in file order; `layout` says which values of a record's outputs are kept: all,
  or those of its real positions) and writes the stamp beside them."""
  from bert_tf import record_schema  # pylint: disable=g-import-not-at-top
  raw = [record.numpy() for record in tf.data.TFRecordDataset(records)]
  with record_schema.RecordFileWriter(records) as writer:
    for index, record in enumerate(raw):
      example = tf.train.Example.FromString(record)
      for name, values in outputs.items():
        values = np.asarray(values[index], np.float32)
        if layout == REAL_POSITIONS:
          values = values[:_real_length(example)]
        example.features.feature[f"{PREFIX}{name}"].float_list.value.extend(
            values.reshape(-1).tolist())
      writer.write(example.SerializeToString(deterministic=True))
  io.write_text(io.join(record_dir, CACHE_STAMP_FILE), json.dumps(stamp, sort_keys=True) + "\n")
  logging.info("--cache_teacher: the teacher's %s for %d training records written into %s "
               "(%s)", ", ".join(outputs), len(raw), records, layout.replace("_", " "))
