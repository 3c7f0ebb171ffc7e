"""extract_features' settings: the flags as a frozen dataclass, their checks, the
output formats and the --layers parser (the run is in run.py)."""

import dataclasses
import os
from typing import Optional, Sequence, Tuple, Union

from bert_tf import length_buckets as length_buckets_lib
from bert_tf import row_packing
from bert_tf.model import provenance
from bert_tf.training import distribution
from bert_tf.training import packed_rows


OUTPUT_FORMATS = ("jsonl", "npz", "tfrecord")
POOLINGS = ("none", "cls", "mean")
# --packing for extract_features: none or exact. There is no static mode: a batch is exactly
# --batch_size lines (the last one fewer), and exact's row ladder already bounds the shapes.
PACKINGS = (row_packing.NONE, row_packing.EXACT)
DEFAULT_LAYERS = "-1,-2,-3,-4"
_EXTENSION_FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".npz": "npz",
                      ".tfrecord": "tfrecord", ".tf_record": "tfrecord", ".tfrecords": "tfrecord"}


class FeatureExtractionError(ValueError):
  """Settings or inputs that cannot work; the message names the flag or the file and line."""


# === Settings ===


@dataclasses.dataclass(frozen=True)
class ExtractFeaturesSettings:
  """Everything an extract_features run needs besides the model config (names are the flags').

  The original's: input_file, output_file, layers (comma-separated indexes into the L block
  outputs), vocab_file, do_lower_case, init_checkpoint, max_seq_length, batch_size. (Its
  use_tpu, master, num_tpu_cores choose the strategy, which the caller passes;
  use_one_hot_embeddings has no effect here.)

  Additions: bert_config_file (None: the config beside init_checkpoint); output_format
  (jsonl, npz, tfrecord; None: from output_file's extension, else jsonl); pooling (none, cls,
  mean); mixed_precision and jit_compile as for training; allow_tokenizer_mismatch (see
  bert_tf.model.provenance); log_every_seconds (how often progress is logged); length_buckets (each
  batch runs cut to its longest line rounded up to a bucket; bert_tf.length_buckets); packing
  (none, exact: each batch's lines share rows; bert_tf.row_packing).
  """
  input_file: str
  output_file: str
  vocab_file: str
  init_checkpoint: str
  bert_config_file: Optional[str] = None
  # Replace an existing output_file (else refused, as convert_checkpoint does).
  overwrite: bool = False
  layers: Union[str, Sequence[int]] = DEFAULT_LAYERS
  do_lower_case: bool = True
  max_seq_length: int = 128
  batch_size: int = 32
  output_format: Optional[str] = None
  pooling: str = "none"
  mixed_precision: str = "none"
  jit_compile: bool = False
  allow_tokenizer_mismatch: bool = False
  log_every_seconds: float = 30.0
  length_buckets: str = length_buckets_lib.AUTO
  # none by default: the original's computation exactly, so the JSON's 6-decimal values are the
  # original's to the last digit; packed rows give the same values to float32 rounding (other
  # matrix shapes), which can flip a last rounded digit.
  packing: str = row_packing.NONE

  def __post_init__(self):
    # A model folder (Hugging Face's, a release's) as --vocab_file: its vocab.txt.
    object.__setattr__(self, "vocab_file", provenance.resolve_vocab_file(self.vocab_file))

  def resolved_output_format(self) -> str:
    """output_format, or the one output_file's extension names (jsonl when it names none)."""
    if self.output_format:
      return self.output_format
    return _EXTENSION_FORMATS.get(os.path.splitext(self.output_file)[1].lower(), "jsonl")

  @property
  def packing_mode(self) -> packed_rows.PackingMode:
    """--packing as the typed value of the training tier (check() refuses any but PACKINGS)."""
    return packed_rows.PackingMode(self.packing)

  def check(self) -> None:
    """Raises FeatureExtractionError naming every flag with an impossible value."""
    problems = []
    for name in ("input_file", "output_file", "vocab_file", "init_checkpoint"):
      if not getattr(self, name):
        problems.append(f"--{name} is required")
    if self.batch_size <= 0:
      problems.append(f"--batch_size must be positive, got {self.batch_size}")
    if self.max_seq_length < 2:
      problems.append(f"--max_seq_length must be at least 2 ([CLS] and [SEP]), got "
                      f"{self.max_seq_length}")
    if self.resolved_output_format() not in OUTPUT_FORMATS:
      problems.append(f"--output_format must be one of {', '.join(OUTPUT_FORMATS)}, got "
                      f"{self.output_format!r}")
    if self.pooling not in POOLINGS:
      problems.append(f"--pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
    if self.packing not in PACKINGS:
      problems.append(f"--packing must be one of {', '.join(PACKINGS)} for extract_features, "
                      f"got {self.packing!r}")
    if self.mixed_precision not in distribution.MIXED_PRECISION_POLICIES:
      problems.append(f"--mixed_precision must be one of "
                      f"{', '.join(distribution.MIXED_PRECISION_POLICIES)}, "
                      f"got {self.mixed_precision!r}")
    if problems:
      raise FeatureExtractionError("; ".join(problems))


def parse_layers(layers: Union[str, Sequence[int]], num_hidden_layers: int,
                 allow_duplicates: bool = True) -> Tuple[int, ...]:
  """--layers ("-1,-2,-3,-4", or a sequence of ints) as a tuple of ints, each checked against
  the model's num_hidden_layers (Python indexing: -L..L-1).

  Raises:
    FeatureExtractionError: naming --layers: empty, not integers, out of range, or repeated
      (only when not allow_duplicates: the npz and tfrecord keys would collide).
  """
  shown = layers if isinstance(layers, str) else ",".join(map(str, layers))
  if isinstance(layers, str):
    parts = [part.strip() for part in layers.split(",") if part.strip()]
    try:
      indexes = tuple(int(part) for part in parts)
    except ValueError:
      raise FeatureExtractionError(f"--layers={shown}: expected comma-separated integers such "
                                   f"as {DEFAULT_LAYERS}") from None
  else:
    indexes = tuple(int(i) for i in layers)
  if not indexes:
    raise FeatureExtractionError(f"--layers={shown}: no layer given (e.g. {DEFAULT_LAYERS})")
  bad = [i for i in indexes if not -num_hidden_layers <= i < num_hidden_layers]
  if bad:
    raise FeatureExtractionError(
        f"--layers={shown}: {', '.join(map(str, bad))} out of range for a model with "
        f"{num_hidden_layers} layers (valid: {-num_hidden_layers}..{num_hidden_layers - 1}, "
        "-1 = the last; the embedding output is not selectable)")
  if not allow_duplicates and len(set(indexes)) != len(indexes):
    raise FeatureExtractionError(f"--layers={shown}: an index is repeated (npz and tfrecord "
                                 "name their arrays by index)")
  return indexes


def layers_for_config(settings: "ExtractFeaturesSettings", config) -> Tuple[int, ...]:
  """The flags checked against the model's config: --layers (parse_layers, repeats only in
  jsonl) and --max_seq_length within its max_position_embeddings; the layer indexes.

  Raises:
    FeatureExtractionError: naming the flag.
  """
  layers = parse_layers(settings.layers, config.num_hidden_layers,
                        allow_duplicates=settings.resolved_output_format() == "jsonl")
  if settings.max_seq_length > config.max_position_embeddings:
    raise FeatureExtractionError(
        f"--max_seq_length={settings.max_seq_length} is longer than the model's "
        f"max_position_embeddings ({config.max_position_embeddings})")
  return layers
