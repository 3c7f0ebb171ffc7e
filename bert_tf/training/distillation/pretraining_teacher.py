"""The teacher of a distilled pretraining run (run_pretraining --teacher): checked, loaded frozen.

A pretraining run with --teacher=PATH trains its model (the student: --bert_config_file, from
--init_checkpoint or random weights) on DistilBERT's triple loss (Sanh et al. 2019) plus the
next-sentence loss as without a teacher:

  alpha x masked LM (the labels)  +  (1 - alpha) x soft masked LM (the teacher's distribution at
  temperature T, scaled by T^2)  +  cosine_weight x (1 - cos) of the last hidden states
  +  next sentence

each masked-LM term summed over the masked positions of the global batch and divided by their
weight, as the original's masked-LM loss is. The cosine compares the last layer's hidden states
at the masked positions: the rows whose last layer both models compute (run_pretraining prunes
the last layer to them) where DistilBERT compares every position; it needs one hidden size, so
its weight defaults to 1 when the teacher's hidden size is the student's and to 0 (logged)
otherwise.

The teacher is a pretrained model with its masked-LM head, of the student's vocabulary: one of
our run_pretraining folders, an original release's checkpoint (its cls/predictions weights),
a Hugging Face BertForPreTraining folder, or a checkpoint of these. It is refused before
anything is written when its recorded tokenizer (vocab md5, casing) or head contradicts the
run's data (training/distillation/teacher.py), its vocab_size is not the student's, it reads
fewer positions than --max_seq_length, or its weights lack the masked-LM head. It runs inside the
training step in inference mode, on the student's own batches (packed rows and dynamic masking
included), and is never part of the student's checkpoints or exports: a resumed run loads it
again.
"""

import dataclasses
import math
from typing import Any, Callable, Dict, List, Mapping, Optional

from absl import logging
import keras
import tensorflow as tf

from bert_tf import record_schema
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model import provenance
from bert_tf.model.heads import build_pretraining_model
from bert_tf.training import distillation
from bert_tf.training.distillation import predictions
from bert_tf.training.distillation import teacher as teacher_lib
from bert_tf.training.errors import TrainingError


@dataclasses.dataclass(frozen=True)
class PretrainingTeacher:
  """A loaded teacher: where it came from, its config, its frozen Keras model and the weight of
  the cosine loss the run uses (0: none)."""
  path: str
  config: BertConfig
  model: keras.Model
  cosine_weight: float

  def outputs(self, model_inputs: Callable[[Mapping[str, tf.Tensor]], Dict[str, tf.Tensor]]
              ) -> Callable[[Mapping[str, tf.Tensor]], Dict[str, tf.Tensor]]:
    """batch -> the teacher's outputs on it (predictions.frozen_outputs)."""
    return predictions.frozen_outputs(self.model, model_inputs)


def settings_problems(settings) -> List[str]:
  """What is wrong with the distillation flags of a pretraining run, one message per flag."""
  problems = distillation.flag_problems(settings.teacher, settings.distill_alpha,
                                       settings.distill_temperature, settings.do_train,
                                       alpha_is="the masked LM's weight")
  weight = settings.distill_cosine_weight
  if weight is not None and not 0 <= weight < math.inf:
    problems.append(f"--distill_cosine_weight must be >= 0 and finite, got {weight}")
  elif weight is not None and not settings.teacher:
    problems.append(f"--distill_cosine_weight={weight} weighs what a teacher teaches: add "
                    "--teacher or drop it")
  return problems


def _flag(settings) -> str:
  return f"{teacher_lib.TEACHER_FLAG}={settings.teacher}"


def student_record(settings, metadata: Optional[Mapping[str, Any]],
                   metadata_source: str) -> teacher_lib.ModelRecord:
  """What the run records of its tokenizer (the data's metadata, else --vocab_file) and head."""
  values: Dict[str, Any] = {"head": provenance.PRETRAINING}
  sources = {"head": "run_pretraining"}
  metadata = metadata or {}
  if metadata.get("vocab_md5"):
    values["vocab_md5"], sources["vocab_md5"] = metadata["vocab_md5"], metadata_source
  elif settings.vocab_file:
    values["vocab_md5"] = record_schema.vocab_checksum(settings.vocab_file)
    sources["vocab_md5"] = settings.vocab_file
  casing = (metadata.get("do_lower_case") if metadata.get("do_lower_case") is not None
            else settings.do_lower_case)
  if casing is not None:
    values["do_lower_case"] = casing
    sources["do_lower_case"] = (metadata_source if metadata.get("do_lower_case") is not None
                                else "--do_lower_case")
  return teacher_lib.ModelRecord(folder=settings.output_dir, sources=sources, **values)


def check_teacher(settings, config: BertConfig, metadata: Optional[Mapping[str, Any]],
                  metadata_source: str) -> Optional[BertConfig]:
  """Refuses a teacher that cannot teach this run, before anything is written; its config.

  Returns:
    The teacher's config (None without --teacher).

  Raises:
    TrainingError: one line naming --teacher and every problem.
  """
  if not settings.teacher:
    return None
  try:
    record = teacher_lib.read_record(settings.teacher)
    teacher_config = checkpoints.config_beside(checkpoints.resolve_checkpoint(settings.teacher))
  except (FileNotFoundError, ValueError) as e:
    raise TrainingError(f"{_flag(settings)}: {e}") from None
  problems = teacher_lib.teacher_problems(
      dataclasses.replace(record, max_seq_length=None),
      student_record(settings, metadata, metadata_source))
  if teacher_config.vocab_size != config.vocab_size:
    problems.append(f"{_flag(settings)} predicts {teacher_config.vocab_size} tokens but the "
                    f"student's config {config.vocab_size}: both must have the data's vocabulary")
  if teacher_config.max_position_embeddings < settings.max_seq_length:
    problems.append(f"{_flag(settings)} reads at most {teacher_config.max_position_embeddings} "
                    f"positions but --max_seq_length={settings.max_seq_length}")
  weight = settings.distill_cosine_weight
  if weight and teacher_config.hidden_size != config.hidden_size:
    problems.append(f"--distill_cosine_weight={weight} compares hidden states, but the "
                    f"teacher's hidden size is {teacher_config.hidden_size} and the student's "
                    f"{config.hidden_size}: use --distill_cosine_weight=0")
  if problems:
    raise TrainingError("; ".join(problems))
  return teacher_config


def cosine_weight(settings, teacher_config: BertConfig, config: BertConfig) -> float:
  """--distill_cosine_weight, or its default: 1 for one hidden size, else 0 (logged)."""
  if settings.distill_cosine_weight is not None:
    return float(settings.distill_cosine_weight)
  if teacher_config.hidden_size == config.hidden_size:
    return 1.0
  logging.info("No cosine loss: the teacher's hidden size %d is not the student's %d",
               teacher_config.hidden_size, config.hidden_size)
  return 0.0


def load_teacher(settings, teacher_config: BertConfig, config: BertConfig,
                 strategy: tf.distribute.Strategy, packed: bool) -> PretrainingTeacher:
  """The teacher's pretraining model (pruned like the student's, packed when its batches are),
  its weights loaded strictly under the strategy and frozen.

  Raises:
    TrainingError: weights it cannot read, or without the masked-LM head.
  """
  weight = cosine_weight(settings, teacher_config, config)
  with strategy.scope():
    model = build_pretraining_model(teacher_config, name="teacher_pretraining",
                                    prune_last_layer=True, packed=packed,
                                    masked_hidden=weight > 0)
    try:
      report = checkpoints.load_weights(model, settings.teacher, strict=False)
    except (FileNotFoundError, ValueError, KeyError, IndexError, tf.errors.OpError) as e:
      reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise TrainingError(f"{_flag(settings)}: cannot load it as a pretraining model "
                          f"({reason})") from None
  if report.missing:
    missing = sorted(report.missing)
    raise TrainingError(
        f"{_flag(settings)} lacks {len(missing)} weight(s) of a pretraining model (e.g. "
        f"{missing[0]}): a teacher needs its masked-LM and next-sentence heads (an encoder "
        "alone, such as a sentence-embedding model, cannot teach pretraining)")
  model.trainable = False
  logging.info("Teacher %s: %d layers, hidden size %d, frozen; loss: %.2f x masked LM + %.2f x "
               "soft masked LM (T = %g) + %.2f x cosine + next sentence", settings.teacher,
               teacher_config.num_hidden_layers, teacher_config.hidden_size,
               settings.distill_alpha, 1.0 - settings.distill_alpha,
               settings.distill_temperature, weight)
  return PretrainingTeacher(settings.teacher, teacher_config, model, weight)
