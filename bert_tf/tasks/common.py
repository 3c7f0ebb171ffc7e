"""The settings every fine-tuning command shares, beside their checks.

FineTuningSettings is the base of each task's settings (ClassifierSettings, SquadSettings,
NerSettings, MultipleChoiceSettings); fine_tuning_problems is the check of its flags that each
task's `check` adds to its own, split_file_problems the check of a task's input files. The rest of a run is elsewhere: where it starts (tasks.start), its output_dir
(training.run_folder), the driver (tasks.fine_tuning), what a model folder records
(bert_tf.model.provenance).
"""

import dataclasses
from typing import List, Mapping, Optional, Tuple

from absl import logging

from bert_tf import length_buckets as length_buckets_lib
from bert_tf import row_packing
from bert_tf.model import provenance
from bert_tf.training import distillation
from bert_tf.training import distribution
from bert_tf.training import layer_selection
from bert_tf.training import optimization
from bert_tf.training import packed_rows


@dataclasses.dataclass(frozen=True, kw_only=True)
class FineTuningSettings:
  """The settings every fine-tuning run shares (keyword-only; the task's settings add theirs).

  The original's: init_checkpoint, do_lower_case, do_train, train_batch_size, learning_rate,
  num_train_epochs, warmup_proportion, save_checkpoints_steps, iterations_per_loop, use_tpu.
  Additions: optimizer ("adamw" as the original, or "lamb") and adam_bias_correction;
  mixed_precision, jit_compile,
  gradient_accumulation_steps, seed (weights of the head, dropout and the data order),
  keep_checkpoint_max, max_nonfinite_steps and shuffle_buffer_size (the original's 100) as in
  run_pretraining; export (a TF Serving model at the end of training);
  allow_tokenizer_mismatch.
  Distillation (tasks.teaching): teacher (a fine-tuned model of the same task whose soft
  targets the run learns from; None: none), distill_alpha (the hard-label loss's weight),
  distill_temperature; init_layers (which encoder layers of a deeper --init_checkpoint the
  model takes, training.layer_selection); cache_teacher; the intermediate losses' weights
  (distill_hidden_weight, distill_attention_weight, distill_value_weight: 0 = off),
  distill_layer_map and distill_relation_heads (training/distillation/features.py).
  """
  init_checkpoint: Optional[str] = None
  do_lower_case: Optional[bool] = True  # None: what the starting model records, else True
  do_train: bool = False
  train_batch_size: int = 32
  learning_rate: float = 5e-5
  num_train_epochs: float = 3.0
  warmup_proportion: float = 0.1
  save_checkpoints_steps: int = 1000
  iterations_per_loop: int = 1000
  use_tpu: bool = False
  optimizer: str = "adamw"
  adam_bias_correction: bool = False
  mixed_precision: str = "none"
  jit_compile: bool = False
  gradient_accumulation_steps: int = 1
  seed: Optional[int] = None
  keep_checkpoint_max: int = 5
  max_nonfinite_steps: int = 5
  shuffle_buffer_size: int = 100
  export: bool = True
  allow_tokenizer_mismatch: bool = False
  length_buckets: str = length_buckets_lib.AUTO
  group_by_length: bool = False
  packing: str = "auto"
  teacher: Optional[str] = None
  distill_alpha: float = distillation.DEFAULT_ALPHA
  distill_temperature: float = distillation.DEFAULT_TEMPERATURE
  init_layers: str = layer_selection.EVEN
  cache_teacher: bool = False
  distill_layer_map: str = distillation.DEFAULT_LAYER_MAP
  distill_hidden_weight: float = 0.0
  distill_attention_weight: float = 0.0
  distill_value_weight: float = 0.0
  distill_relation_heads: Optional[int] = None

  @property
  def packing_mode(self) -> packed_rows.PackingMode:
    """--packing parsed (packed_rows.PackingMode); row_packing.PackingError if unknown."""
    return packed_rows.PackingMode.parse(self.packing)

  def buckets(self, max_seq_length: int) -> Optional[Tuple[int, ...]]:
    """The --length_buckets boundaries for records of max_seq_length (None: fixed length;
    always None on TPU with auto, see bert_tf.length_buckets)."""
    return length_buckets_lib.parse(self.length_buckets, max_seq_length,
                                    use_tpu=self.use_tpu)

  def record_buckets(self, records: str, max_seq_length: int, rows: int,
                     grouped: bool = False) -> Optional[Tuple[int, ...]]:
    """The boundaries for batches of `rows` records (one replica's share of one update) of
    the record file `records`: with --length_buckets=auto, fitted to the file's lengths
    (bert_tf.length_buckets.fit_buckets; multiples of 8 on GPUs, for their tensor cores),
    except for length-grouped training batches, which are sorted by length and keep the
    ladder; otherwise buckets(max_seq_length)."""
    boundaries = self.buckets(max_seq_length)
    if (boundaries is None or grouped
        or (self.length_buckets or "").strip().lower() != length_buckets_lib.AUTO):
      return boundaries
    from bert_tf.training import bucketing  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    multiple = 8 if tf.config.list_physical_devices("GPU") else 1
    counts = bucketing.length_counts(records, max_seq_length)
    fitted = length_buckets_lib.fit_buckets(counts, max(rows, 1), max_seq_length,
                                            multiple=multiple)
    if sum(counts):
      longest_shares = length_buckets_lib.batch_longest_distribution(counts, max(rows, 1))
      logging.info("  Length buckets fitted to %s (%d records, batches of %d per replica): "
                   "%s; expected %.1f positions per batch, %.1f with the fixed ladder, %.1f "
                   "at the longest row", records, sum(counts), rows, ",".join(map(str, fitted)),
                   length_buckets_lib.expected_width(longest_shares, fitted),
                   length_buckets_lib.expected_width(longest_shares, boundaries),
                   sum(length * p for length, p in enumerate(longest_shares)))
    return fitted

  def grouped(self, max_seq_length: int) -> bool:
    """Whether training batches are grouped by length: group_by_length with length buckets.
    At a fixed length (--length_buckets=none, TPUs) grouping would save nothing, so the
    training order is then the original's plain shuffle."""
    return self.group_by_length and self.buckets(max_seq_length) is not None

  def __post_init__(self):
    # A model folder (Hugging Face's, a release's, an export) as --vocab_file: its vocab.txt.
    # (Every task's settings declare vocab_file.)
    vocab_file = dataclasses.asdict(self).get("vocab_file")
    if vocab_file:
      object.__setattr__(self, "vocab_file", provenance.resolve_vocab_file(vocab_file))


# Counts every fine-tuning run has (FineTuningSettings), and the batch sizes some do.
_POSITIVE_RUN_FLAGS = ("train_batch_size", "eval_batch_size", "predict_batch_size",
                       "save_checkpoints_steps", "iterations_per_loop",
                       "gradient_accumulation_steps", "keep_checkpoint_max",
                       "shuffle_buffer_size")


def fine_tuning_problems(settings: FineTuningSettings, num_replicas: int) -> List[str]:
  """What is wrong with a fine-tuning run's shared flags (the counts, num_train_epochs,
  warmup_proportion, optimizer, mixed_precision, length_buckets, train_batch_size against
  replicas x accumulation, eval / predict_batch_size against replicas when evaluating /
  predicting), one message per flag; empty when nothing is."""
  problems = []
  # The shared flags by name: a task's settings declare the batch sizes of its phases
  # (SQuAD's has no eval phase).
  fields = dataclasses.asdict(settings)
  for name in _POSITIVE_RUN_FLAGS:
    value = fields.get(name)
    if value is not None and value <= 0:
      problems.append(f"--{name} must be positive, got {value}")
  for flag, phase in (("eval_batch_size", "do_eval"), ("predict_batch_size", "do_predict")):
    value = fields.get(flag)
    if fields.get(phase, False) and value and value > 0 and value % num_replicas:
      problems.append(f"--{flag}={value} must be a multiple of the number of replicas "
                      f"({num_replicas})")
  if settings.do_train and settings.num_train_epochs <= 0:
    problems.append(f"--num_train_epochs must be positive, got {settings.num_train_epochs}")
  if not 0 <= settings.warmup_proportion <= 1:
    problems.append(f"--warmup_proportion must be in [0, 1], got {settings.warmup_proportion}")
  if settings.optimizer not in optimization.OPTIMIZER_NAMES:
    problems.append(f"--optimizer must be one of {', '.join(optimization.OPTIMIZER_NAMES)}")
  if settings.mixed_precision not in distribution.MIXED_PRECISION_POLICIES:
    problems.append("--mixed_precision must be one of "
                    f"{', '.join(distribution.MIXED_PRECISION_POLICIES)}")
  try:
    packing = settings.packing_mode
  except row_packing.PackingError as e:
    problems.append(str(e))
    packing = packed_rows.PackingMode(row_packing.NONE)
  if packing.packed and settings.group_by_length:
    problems.append(f"--group_by_length does not apply to packed rows (--packing={packing.value}"
                    "): packing already leaves almost no padding; drop one of the two")
  if settings.length_buckets and settings.max_seq_length > 0:
    try:
      length_buckets_lib.parse(settings.length_buckets, settings.max_seq_length,
                           use_tpu=settings.use_tpu)
    except length_buckets_lib.LengthBucketsError as e:
      problems.append(str(e))
  problems += distillation_problems(settings)
  split = num_replicas * max(1, settings.gradient_accumulation_steps)
  if settings.do_train and settings.train_batch_size > 0 and settings.train_batch_size % split:
    problems.append(f"--train_batch_size={settings.train_batch_size} must be a multiple of "
                    f"replicas ({num_replicas}) x --gradient_accumulation_steps "
                    f"({settings.gradient_accumulation_steps})")
  return problems


def distillation_problems(settings: FineTuningSettings) -> List[str]:
  """What is wrong with the distillation flags (--teacher, --distill_alpha,
  --distill_temperature, --cache_teacher, the intermediate losses', --init_layers), one
  message per flag."""
  problems = distillation.flag_problems(settings.teacher, settings.distill_alpha,
                                       settings.distill_temperature, settings.do_train)
  if settings.cache_teacher and not settings.teacher:
    problems.append("--cache_teacher caches a --teacher's outputs: add --teacher")
  problems += distillation.intermediate_flag_problems(settings)
  try:
    layer_selection.parse_init_layers(settings.init_layers)
  except ValueError as e:
    problems.append(str(e))
  return problems


def transfer_file_problems(transfer_file: Optional[str],
                           teacher: Optional[str]) -> List[str]:
  """--transfer_file (a task's inputs without labels) is refused without --teacher: only a
  teacher's soft targets train on it."""
  if transfer_file and not teacher:
    return [f"--transfer_file={transfer_file} has no labels: only a --teacher's soft targets "
            "train on it; add --teacher"]
  return []


def split_file_problems(settings, config, holding: Mapping[str, str]) -> List[str]:
  """The checks every task with train/eval/predict files makes: at least one of --do_train,
  --do_eval, --do_predict; a file for each (settings.file(split), holding[split] saying what
  --data_dir must hold); --max_seq_length within the config's positions and at least 4."""
  problems = []
  if not (settings.do_train or settings.do_eval or settings.do_predict):
    problems.append("At least one of --do_train, --do_eval or --do_predict must be True.")
  for split, wanted in (("train", settings.do_train), ("eval", settings.do_eval),
                        ("predict", settings.do_predict)):
    if wanted and not settings.file(split):
      problems.append(f"--do_{split} needs --{split}_file or --data_dir (holding "
                      f"{holding[split]})")
  if settings.max_seq_length > config.max_position_embeddings:
    problems.append(f"Cannot use sequence length {settings.max_seq_length} because the BERT "
                    f"model was only trained up to sequence length "
                    f"{config.max_position_embeddings} (--max_seq_length)")
  if settings.max_seq_length < 4:
    problems.append(f"--max_seq_length must be at least 4, got {settings.max_seq_length}")
  return problems
