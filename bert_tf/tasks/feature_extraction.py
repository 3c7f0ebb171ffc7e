"""extract_features as a library: text lines -> the hidden states of chosen BERT layers.

What carries over from the original release (google-research/bert, extract_features.py):

* Input: one example per line, read to the end of the file as UTF-8 and stripped. A line
  matching `^(.*) \\|\\|\\| (.*)$` is a pair, split at its **last** " ||| " (the first group is
  greedy); any other line, the empty one included, is a single text. unique_id is the 0-based
  line number. Lines end at "\\n" only ("\\r" is stripped with the other whitespace).
* Features: `[CLS] A [SEP]` (input_type_ids 0) then `B [SEP]` (1) when B has WordPieces, with
  the classifier's truncation (classifier_data.truncate_seq_pair); a single text is cut to
  max_seq_length - 2 WordPieces. A second text that tokenizes to nothing gives the single
  layout.
* Layers: indexes into the L transformer block outputs, Python style (-1 = the last block,
  0 = the first); the embedding output cannot be selected.
* The JSONL output, byte for byte: one line per input line,
  `{"linex_index": id, "features": [{"token": t, "layers": [{"index": i, "values": [...]}]}]}`
  with one features entry per real token ([CLS] and [SEP] included, no padding), the layers in
  the order asked, every value `round(float(x), 6)`, written by json.dumps with its defaults.

Beyond the original (whose output is about 15 kB of JSON per token, google-research/bert#91):

* Streaming: lines are read lazily, tokenized and run through the model one batch at a time,
  and each batch's output is written before the next is read, so memory stays flat whatever
  the input's size. Every batch is cut to its longest line rounded up to a length bucket
  (--length_buckets; none: max_seq_length), and the last one filled with dummy rows (dropped),
  so the model sees a few static shapes. Progress is logged with rate and ETA.
* `packing` (--packing=exact): each batch's lines share rows (bert_tf.row_packing: attention
  within a line, positions restarting at its [CLS]), packed first-fit decreasing into the
  fewest rows, in the narrowest length bucket that needs no more of them, the row
  count rounded up to row_packing.row_ladder(batch_size); the outputs are moved back to each
  line's own positions, so the files hold the unpacked run's values (to float32 rounding).
  The share of computed positions that are real tokens is logged at the end of every run.
* `output_format`: jsonl (the original), npz or tfrecord, both holding the float32 values
  unrounded (layouts below). `pooling`: none (per token, the original), cls (the [CLS] vector)
  or mean (the mean over the real tokens, [CLS] and [SEP] included).
* Any checkpoint checkpoints.load_weights reads (original TF1, Model Garden, Hugging Face
  safetensors, .keras, our training checkpoints); the config may come from beside it.
* Every output is written under a temporary name and renamed when complete (bert_tf.io).

Output layouts (`layer_<i>` is named by the index as given, e.g. `layer_-1`):

  jsonl, pooling none: the original's lines (above).
  jsonl, pooling cls/mean: `{"linex_index": id, "pooling": "mean",
      "layers": [{"index": i, "values": [H values]}, ...]}`, values rounded as above.
  npz (numpy.load): one archive of .npy arrays, the tokens of all lines concatenated:
      layer_<i>       float32 [T, H] per token (T = total real tokens), or [N, H] with pooling
      tokens          str [T] (fixed-width unicode, no pickle needed)
      token_ids       int32 [T]
      input_type_ids  int32 [T]
      offsets         int64 [N + 1]: line n's tokens are rows offsets[n]:offsets[n + 1]
      unique_ids      int64 [N]
      layers          int32 [number of layers]: the indexes, in the order asked
      pooling         str []: "none", "cls" or "mean"
  tfrecord: one tf.train.Example per line: unique_id (int64), tokens (bytes [n]), token_ids
      and input_type_ids (int64 [n]), layer_<i> (float [n * H], token-major, or [H] with
      pooling).

Shapes in comments: N = lines, B = batch, S = max_seq_length, H = hidden size, K = layers asked.
"""

import contextlib
import dataclasses
import json
import os
import queue
import re
import shutil
import tempfile
import threading
import time
import zipfile
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence,
                    Tuple, Union)

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf import length_buckets as length_buckets_lib
from bert_tf import record_schema
from bert_tf import row_packing
from bert_tf import tokenization
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model import provenance
from bert_tf.model.encoder import build_encoder
from bert_tf.model.layers import dtype_policy
from bert_tf.tasks import classifier_data
from bert_tf.tasks import run_folder
from bert_tf.training import loop

OUTPUT_FORMATS = ("jsonl", "npz", "tfrecord")
POOLINGS = ("none", "cls", "mean")
# --packing for extract_features: none or exact. There is no static mode: a batch is exactly
# --batch_size lines (the last one fewer), and exact's row ladder already bounds the shapes.
PACKINGS = (row_packing.NONE, row_packing.EXACT)
DEFAULT_LAYERS = "-1,-2,-3,-4"
# The original's pair separator; the first group is greedy, so the split is at the last one.
_PAIR = re.compile(r"^(.*) \|\|\| (.*)$")
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
    if self.mixed_precision not in loop.MIXED_PRECISION_POLICIES:
      problems.append(f"--mixed_precision must be one of "
                      f"{', '.join(loop.MIXED_PRECISION_POLICIES)}, got {self.mixed_precision!r}")
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


# === Examples and features ===


@dataclasses.dataclass(frozen=True)
class InputExample:
  """One input line: its 0-based line number and its text(s) (text_b None for a single text)."""
  unique_id: int
  text_a: str
  text_b: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class InputFeatures:
  """The model inputs of one line; the id lists are padded to seq_length, tokens are not."""
  unique_id: int
  tokens: List[str]
  input_ids: List[int]
  input_mask: List[int]
  input_type_ids: List[int]


def _check_input_file(input_file: str) -> None:
  if not io.exists(input_file):
    raise FileNotFoundError(f"--input_file={input_file}: no such file")
  if io.isdir(input_file):
    raise FileNotFoundError(f"--input_file={input_file} is a directory, expected a text file")


def example_from_line(unique_id: int, line: str) -> InputExample:
  """One stripped line -> an InputExample, a pair when it holds " ||| " (split at the last)."""
  match = _PAIR.match(line)
  if match is None:
    return InputExample(unique_id, line, None)
  return InputExample(unique_id, match.group(1), match.group(2))


def read_examples(input_file: str) -> Iterator[InputExample]:
  """The examples of a text file, one per line, read lazily (a generator).

  Raises (when iterated):
    FileNotFoundError: a missing input file (naming --input_file).
    FeatureExtractionError: a line that is not valid UTF-8 (file and line named).
  """
  _check_input_file(input_file)
  warned = False
  with io.open_file(input_file, "rb") as f:
    # Binary lines end at b"\n" only, as the original's GFile.readline.
    for unique_id, raw in enumerate(f):
      try:
        line = tokenization.convert_to_unicode(raw)
      except ValueError as e:
        raise FeatureExtractionError(f"{input_file}:{unique_id + 1}: {e}") from None
      line, joined = io.as_tf_readline(line)
      if joined and not warned:
        warned = True
        logging.warning("%s:%d: a carriage return (\\r) inside the line is deleted, as the "
                        "original's reader deletes it, joining the text either side (so is "
                        "every later one)", input_file, unique_id + 1)
      yield example_from_line(unique_id, line.strip())


def count_lines(input_file: str, chunk_size: int = 1 << 22) -> int:
  """The number of examples read_examples yields (lines, the last one maybe without "\\n"),
  counted in binary chunks without decoding."""
  _check_input_file(input_file)
  count, last = 0, b"\n"
  with io.open_file(input_file, "rb") as f:
    while True:
      chunk = f.read(chunk_size)
      if not chunk:
        break
      count += chunk.count(b"\n")
      last = chunk[-1:]
  return count + (last != b"\n")


class _FeatureConverter:
  """Example -> InputFeatures, as the original's convert_examples_to_features."""

  def __init__(self, seq_length: int, tokenizer):
    if seq_length < 2:
      raise FeatureExtractionError(f"--max_seq_length={seq_length}: at least 2 are needed for "
                                   "[CLS] and [SEP]")
    self.seq_length = seq_length
    self.tokenizer = tokenizer
    self.cls_id, self.sep_id = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
    to_ids = getattr(tokenizer, "tokenize_to_ids", None)
    self.to_ids = to_ids if to_ids is not None else \
        (lambda text: tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)))

  def __call__(self, example: InputExample) -> InputFeatures:
    seq_length = self.seq_length
    ids_a = self.to_ids(example.text_a)
    # The original tokenizes B only when text_b is non-empty and pairs only when B has pieces.
    ids_b = self.to_ids(example.text_b) if example.text_b else None
    if ids_b:
      if seq_length < 3:
        raise FeatureExtractionError(
            f"line {example.unique_id + 1} is a pair, which needs --max_seq_length >= 3 "
            f"([CLS] A [SEP] B [SEP]), got {seq_length}")
      classifier_data.truncate_seq_pair(ids_a, ids_b, seq_length - 3)
    else:
      del ids_a[seq_length - 2:]
    ids = [self.cls_id] + ids_a + [self.sep_id]
    num_segment_a = len(ids)
    if ids_b:  # truncation may have emptied B: then the single layout, as the original
      ids += ids_b + [self.sep_id]
    num_tokens = len(ids)
    padding = [0] * (seq_length - num_tokens)
    return InputFeatures(
        unique_id=example.unique_id,
        tokens=self.tokenizer.convert_ids_to_tokens(ids),
        input_ids=ids + padding,
        input_mask=[1] * num_tokens + padding,
        input_type_ids=[0] * num_segment_a + [1] * (num_tokens - num_segment_a) + padding)


def convert_examples_to_features(examples: Iterable[InputExample], seq_length: int,
                                 tokenizer) -> Iterator[InputFeatures]:
  """InputExamples -> InputFeatures, lazily (the original's name and arguments; it returned a
  list, this is a generator: wrap it in list() for one).

  Args:
    examples: InputExamples (e.g. read_examples(path)).
    seq_length: the padded length (--max_seq_length).
    tokenizer: a tokenization.FullTokenizer (anything with tokenize, convert_tokens_to_ids
      and convert_ids_to_tokens).
  """
  converter = _FeatureConverter(seq_length, tokenizer)
  for example in examples:
    yield converter(example)


def batches(items: Iterable[Any], batch_size: int) -> Iterator[List[Any]]:
  """Lists of batch_size consecutive items (the last may be shorter), lazily."""
  batch = []
  for item in items:
    batch.append(item)
    if len(batch) == batch_size:
      yield batch
      batch = []
  if batch:
    yield batch


def _prefetch(items: Iterator[Any], depth: int = 2) -> Iterator[Any]:
  """`items` produced by a background thread at most `depth` ahead: the next batch is read
  and tokenized while the model runs (TensorFlow releases the GIL)."""
  buffer: "queue.Queue" = queue.Queue(maxsize=depth)
  done = object()
  stop = threading.Event()

  def put(entry) -> bool:
    """Waits for room unless the consumer has stopped (then a full queue would block forever)."""
    while not stop.is_set():
      try:
        buffer.put(entry, timeout=0.1)
        return True
      except queue.Full:
        continue
    return False

  def produce():
    try:
      for item in items:
        if not put((item, None)):
          return
      put((done, None))
    except BaseException as e:  # pylint: disable=broad-except
      put((done, e))

  thread = threading.Thread(target=produce, name="extract_features_reader", daemon=True)
  thread.start()
  try:
    while True:
      item, error = buffer.get()
      if item is done:
        if error is not None:
          raise error
        return
      yield item
  finally:
    stop.set()
    thread.join()


# === The model ===


def load_encoder(config: BertConfig, init_checkpoint: str, packed: bool = False) -> keras.Model:
  """build_encoder(config, packed=packed) with the weights of init_checkpoint (any format
  load_weights reads; a packed encoder has the same weights).

  Raises:
    FeatureExtractionError: a checkpoint that lacks encoder weights or has other shapes (only
      the pooler, which extraction does not use, may be missing).
  """
  encoder = build_encoder(config, packed=packed)
  report = checkpoints.load_weights(encoder, init_checkpoint, strict=False)
  missing = [name for name in report.missing if not name.startswith("bert/pooler/")]
  if missing or report.mismatched:
    raise FeatureExtractionError(
        f"--init_checkpoint={init_checkpoint} does not hold this model's encoder weights "
        f"(--bert_config_file another model's?): {report.summary()}")
  return encoder


def is_packed_encoder(encoder: keras.Model) -> bool:
  """Whether encoder is a build_encoder(..., packed=True) (it takes packed rows' positions)."""
  names = encoder.input.keys() if isinstance(encoder.input, dict) else \
      [tensor.name for tensor in encoder.inputs]
  return row_packing.POSITION_IDS in names


def packed_copy(encoder: keras.Model) -> keras.Model:
  """build_encoder(config, packed=True) holding encoder's weights (moved by their original
  names), in encoder's dtype policy."""
  with dtype_policy(encoder.get_layer("layer_0").dtype_policy.name):
    packed = build_encoder(checkpoints.config_from_model(encoder), name=encoder.name,
                           packed=True)
  checkpoints.set_original_weights(packed, checkpoints.get_original_weights(encoder),
                                   strict=False, source=encoder.name)
  return packed


class FeatureExtractor:
  """Runs the encoder on padded (or packed) batches and returns the chosen layers (optionally
  pooled).

  Only the graph up to the deepest layer asked is computed (no pooler). Inference only:
  dropout is off (training=False). real_positions and computed_positions count the real tokens
  and the positions the model computed (dummy rows and padding included) over every
  run_features call.
  """

  def __init__(self, encoder: keras.Model, layers: Sequence[int], pooling: str = "none",
               strategy: Optional[tf.distribute.Strategy] = None, jit_compile: bool = False,
               length_buckets: Optional[Sequence[int]] = None, packing: str = row_packing.NONE):
    """Builds the sub-model that ends at the deepest block asked.

    Args:
      encoder: a model from build_encoder (its layers named layer_0 ... layer_{L-1}); packed
        (build_encoder(..., packed=True)) for packing exact, else a packed copy is made.
      layers: indexes into the block outputs (parse_layers' result).
      pooling: none, cls or mean.
      strategy: where to run (default: the current one); the batch is split over its replicas.
      jit_compile: compile the forward pass with XLA.
      length_buckets: run_features cuts each batch to its longest row rounded up to one of
        these lengths (bert_tf.length_buckets); None: the features' length. With packing, the
        row widths to choose from (with the features' length).
      packing: none (one line per row) or exact (each batch's lines packed into the fewest
        rows, bert_tf.row_packing).
    """
    self.length_buckets = None if length_buckets is None else tuple(length_buckets)
    if pooling not in POOLINGS:
      raise FeatureExtractionError(f"--pooling must be one of {', '.join(POOLINGS)}")
    if packing not in PACKINGS:
      raise FeatureExtractionError(f"--packing must be one of {', '.join(PACKINGS)} for "
                                   f"extract_features, got {packing!r}")
    self.packing = packing
    self.real_positions = 0
    self.computed_positions = 0
    num_layers = len([layer for layer in encoder.layers if re.fullmatch(r"layer_\d+", layer.name)])
    self.layers = parse_layers(layers, num_layers)
    self.pooling = pooling
    self.strategy = strategy or tf.distribute.get_strategy()
    blocks = sorted({i % num_layers for i in self.layers})
    self._order = [blocks.index(i % num_layers) for i in self.layers]
    with self.strategy.scope():
      if packing == row_packing.EXACT:
        if not is_packed_encoder(encoder):
          encoder = packed_copy(encoder)
        # The [CLS] positions only feed the pooler, which extraction never runs.
        inputs = {key: value for key, value in encoder.input.items()
                  if key != row_packing.CLS_POSITIONS}
        forward = self._packed_forward
      elif is_packed_encoder(encoder):
        raise FeatureExtractionError("a packed encoder needs packing=exact")
      else:
        inputs = encoder.input
        forward = self._forward
      outputs = [encoder.get_layer(f"layer_{b}").output for b in blocks]
      self._model = keras.Model(inputs, outputs, name="feature_extractor")
    self._step = tf.function(forward, jit_compile=jit_compile, reduce_retracing=True,
                             autograph=False)

  def _block_outputs(self, inputs) -> List[tf.Tensor]:
    """The asked layers' outputs in the order asked, float32 [B, S, H] each."""
    outputs = self._model(inputs, training=False)
    if not isinstance(outputs, (list, tuple)):
      outputs = [outputs]
    return [tf.cast(outputs[k], tf.float32) for k in self._order]

  def _replica_forward(self, inputs):
    values = tf.stack(self._block_outputs(inputs))  # [K, B, S, H]
    if self.pooling == "cls":
      return values[:, :, 0]  # [K, B, H]
    if self.pooling == "mean":
      mask = tf.cast(inputs["input_mask"], tf.float32)[None, :, :, None]  # [1, B, S, 1]
      count = tf.maximum(tf.reduce_sum(mask, axis=2), 1.0)  # dummy rows have no tokens
      return tf.reduce_sum(values * mask, axis=2) / count
    return values

  def _forward(self, inputs):
    outputs = self.strategy.run(self._replica_forward, args=(inputs,))
    return self.strategy.gather(outputs, axis=1)

  def _replica_packed_forward(self, inputs):
    """Packed rows [R, W] -> [K, R, W, H], or [K, R * M, H] pooled per slot (M examples per
    row at most, slot order)."""
    inputs = dict(inputs)
    cls_positions = inputs.pop(row_packing.CLS_POSITIONS)  # [R, M]
    outputs = self._block_outputs(inputs)
    if self.pooling == "none":
      return tf.stack(outputs)
    if self.pooling == "cls":
      pooled = [tf.gather(x, cls_positions, batch_dims=1) for x in outputs]  # [R, M, H] each
    else:  # mean over each slot's positions (input_mask holds the slot, 1..M)
      slots = tf.range(1, tf.shape(cls_positions)[1] + 1)
      member = tf.cast(inputs["input_mask"][:, None, :] == slots[None, :, None],
                       tf.float32)  # [R, M, W]
      count = tf.maximum(tf.reduce_sum(member, axis=2), 1.0)[:, :, None]  # empty slots: 0
      pooled = [tf.einsum("rmw,rwh->rmh", member, x) / count for x in outputs]
    values = tf.stack(pooled)  # [K, R, M, H]
    shape = tf.shape(values)
    return tf.reshape(values, [shape[0], shape[1] * shape[2], shape[3]])

  def _packed_forward(self, inputs):
    outputs = self.strategy.run(self._replica_packed_forward, args=(inputs,))
    return self.strategy.gather(outputs, axis=1)

  def _distribute(self, batch: Dict[str, np.ndarray]):
    """The [N, ...] arrays of batch, split over the replicas along N."""
    replicas = self.strategy.num_replicas_in_sync
    size = len(next(iter(batch.values())))
    if size % replicas:
      raise FeatureExtractionError(f"a batch of {size} does not split over {replicas} replicas "
                                   "(--batch_size must be a multiple of them)")
    per = size // replicas

    def part(ctx):
      start = ctx.replica_id_in_sync_group * per
      return {key: value[start:start + per] for key, value in batch.items()}

    return self.strategy.experimental_distribute_values_from_function(part)

  def __call__(self, input_ids: np.ndarray, input_mask: np.ndarray,
               input_type_ids: np.ndarray) -> np.ndarray:
    """[B, S] int arrays -> float32 [K, B, S, H], or [K, B, H] with pooling.

    B must be a multiple of the strategy's replicas (run_batches pads every batch to
    batch_size).
    """
    if self.packing != row_packing.NONE:
      raise FeatureExtractionError("a packed FeatureExtractor takes packed rows: call "
                                   "run_features or run_packed")
    inputs = self._distribute(dict(input_word_ids=np.asarray(input_ids, np.int32),
                                   input_mask=np.asarray(input_mask, np.int32),
                                   input_type_ids=np.asarray(input_type_ids, np.int32)))
    return np.asarray(self._step(inputs))

  def run_packed(self, rows: Mapping[str, np.ndarray]) -> np.ndarray:
    """Packed rows (row_packing.pack_arrays' input_word_ids, input_mask holding slots,
    input_type_ids, input_position_ids [R, W] and packed_cls_positions [R, M]) -> float32
    [K, R, W, H] per position of the rows, or [K, R * M, H] per slot with pooling. R must be
    a multiple of the strategy's replicas."""
    keys = ("input_word_ids", "input_mask", "input_type_ids", row_packing.POSITION_IDS,
            row_packing.CLS_POSITIONS)
    if self.packing != row_packing.EXACT:
      raise FeatureExtractionError("packed rows need a FeatureExtractor with packing=exact")
    inputs = self._distribute({key: np.asarray(rows[key], np.int32) for key in keys})
    return np.asarray(self._step(inputs))

  def _widths(self, seq_length: int) -> List[int]:
    """The lengths a batch of features of seq_length may be cut to (seq_length the last)."""
    if self.length_buckets is None:
      return [seq_length]
    return [b for b in self.length_buckets if b < seq_length] + [seq_length]

  def run_features(self, features: Sequence[InputFeatures], batch_size: Optional[int] = None
                   ) -> np.ndarray:
    """The outputs of n InputFeatures of one seq_length: float32 [K, n, S', H], or [K, n, H]
    with pooling; each feature's token values at its own positions 0 .. tokens - 1.

    Unpacked, the batch is padded to batch_size with dummy rows (dropped from the result) so
    every call has the same batch size. With length_buckets the positions after the bucket of
    the longest row are not computed: S' is that bucket (every real token is in it). Packed
    (exact), the features are packed into rows (_run_packed_features) and S' is the longest
    feature's length (zeros past each feature's tokens).
    """
    size = batch_size or len(features)
    if len(features) > size:
      raise ValueError(f"{len(features)} features in a batch of {size}")
    seq_length = len(features[0].input_ids)
    lengths = [int(np.count_nonzero(feature.input_mask)) for feature in features]
    self.real_positions += sum(lengths)
    if self.packing == row_packing.EXACT:
      return self._run_packed_features(features, lengths, size)
    if self.length_buckets is not None:
      seq_length = length_buckets_lib.bucket_for(max(lengths), self._widths(seq_length))
    arrays = [np.zeros((size, seq_length), np.int32) for _ in range(3)]
    for row, feature in enumerate(features):
      arrays[0][row] = feature.input_ids[:seq_length]
      arrays[1][row] = feature.input_mask[:seq_length]
      arrays[2][row] = feature.input_type_ids[:seq_length]
    self.computed_positions += size * seq_length
    return self(*arrays)[:, :len(features)]

  def _run_packed_features(self, features: Sequence[InputFeatures], lengths: Sequence[int],
                           batch_size: int) -> np.ndarray:
    """run_features on packed rows: the fewest rows (first-fit decreasing) in the narrowest
    width among the buckets (and seq_length) that needs no more of them
    and the row count rounded up to the ladder of a full batch and then to a multiple of the
    replicas (row_packing.exact_shape, as input_pipeline.pack_batch for tf.data); the outputs
    moved back to each feature's positions."""
    seq_length = len(features[0].input_ids)
    per_row = row_packing.MAX_EXAMPLES_PER_ROW
    width, count = row_packing.exact_shape(lengths, self._widths(seq_length), batch_size,
                                           per_row, self.strategy.num_replicas_in_sync)
    columns = (("input_word_ids", "input_ids"), ("input_mask", "input_mask"),
               ("input_type_ids", "input_type_ids"))
    tokens = {key: np.array([getattr(f, name)[:width] for f in features], np.int32)
              for key, name in columns}
    n = len(features)
    # Which line is in which slot: pack_arrays returns per-example features in slot order.
    rows = row_packing.pack_arrays(tokens, {"index": np.arange(n)}, width, rows=count,
                                   max_per_row=per_row, fill={"index": -1})
    self.computed_positions += rows["input_word_ids"].shape[0] * width
    values = self.run_packed(rows)  # [K, R, W, H], or [K, R * M, H] pooled
    filled = np.flatnonzero(rows["index"] >= 0)
    slot_of = np.empty(n, np.int64)
    slot_of[rows["index"][filled]] = filled
    if self.pooling != "none":
      return values[:, slot_of]
    row, slot = np.divmod(slot_of, per_row)
    start = rows[row_packing.CLS_POSITIONS][row, slot]  # each line's first position in its row
    offsets = np.arange(max(lengths))
    real = offsets[None, :] < np.asarray(lengths)[:, None]  # [n, S']
    positions = np.where(real, start[:, None] + offsets[None, :], 0)
    out = values[:, row[:, None], positions]  # [K, n, S', H]
    out[:, ~real] = 0.0
    return out


# === Writers ===
# A writer gets write_batch(features, values) once per batch, values being the model's output
# for those features: float32 [K, n, S, H], or [K, n, H] with pooling.


def round_values(values: np.ndarray) -> List[Any]:
  """`round(float(x), 6)` of every value, as nested lists: the original's numbers.

  For float32 values numpy gives exactly Python's result, vectorised: x * 10**6 is exact in
  float64 (a 24-bit significand times 15625 * 2**6 fits in 53 bits), rint rounds that exact
  value half to even as Python's correctly rounded round() does, and the division by 10**6 is
  correctly rounded like the decimal-to-float conversion round() ends with. Other dtypes go
  through Python's round().
  """
  values = np.asarray(values)
  if values.dtype == np.float32:
    return np.round(values.astype(np.float64), 6).tolist()

  def rounded(item):
    return [rounded(x) for x in item] if isinstance(item, list) else round(item, 6)

  return rounded(values.astype(np.float64).tolist())


def jsonl_line(feature: InputFeatures, layers: Sequence[int], values: np.ndarray,
               pooling: str = "none") -> str:
  """One output line (with its "\\n") for one feature; values: [K, S, H] or [K, H] (pooled)."""
  values = np.asarray(values)
  if pooling == "none":
    per_token = round_values(values[:, :len(feature.tokens)].transpose(1, 0, 2))  # [n, K, H]
    line = {"linex_index": feature.unique_id, "features": [
        {"token": token, "layers": [{"index": index, "values": layer_values}
                                    for index, layer_values in zip(layers, token_values)]}
        for token, token_values in zip(feature.tokens, per_token)]}
  else:
    line = {"linex_index": feature.unique_id, "pooling": pooling, "layers": [
        {"index": index, "values": layer_values}
        for index, layer_values in zip(layers, round_values(values))]}
  return json.dumps(line) + "\n"


class JsonlWriter:
  """The original's JSON lines, to a binary file-like object."""

  def __init__(self, sink, layers: Sequence[int], pooling: str = "none"):
    self.sink = sink
    self.layers = tuple(layers)
    self.pooling = pooling

  def write_batch(self, features: Sequence[InputFeatures], values: np.ndarray) -> None:
    lines = [jsonl_line(feature, self.layers, values[:, row], self.pooling)
             for row, feature in enumerate(features)]
    self.sink.write("".join(lines).encode("ascii"))  # json.dumps' ensure_ascii


def layer_key(index: int) -> str:
  """The npz array / tfrecord feature name of a layer index: layer_-1, layer_0, ..."""
  return f"layer_{index}"


def _int64s(values: Sequence[int]) -> tf.train.Feature:
  return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


class TfRecordWriter:
  """One tf.train.Example per line, to a record_schema.RecordFileWriter (or anything with write)."""

  def __init__(self, sink, layers: Sequence[int], pooling: str = "none"):
    self.sink = sink
    self.layers = tuple(layers)
    self.pooling = pooling

  def write_batch(self, features: Sequence[InputFeatures], values: np.ndarray) -> None:
    for row, feature in enumerate(features):
      num_tokens = len(feature.tokens)
      entries = {
          "unique_id": _int64s([feature.unique_id]),
          "tokens": tf.train.Feature(bytes_list=tf.train.BytesList(
              value=[token.encode("utf-8") for token in feature.tokens])),
          "token_ids": _int64s(feature.input_ids[:num_tokens]),
          "input_type_ids": _int64s(feature.input_type_ids[:num_tokens]),
      }
      for k, index in enumerate(self.layers):
        rows = values[k, row] if self.pooling != "none" else values[k, row, :num_tokens]
        entries[layer_key(index)] = tf.train.Feature(float_list=tf.train.FloatList(
            value=np.ascontiguousarray(rows, np.float32).ravel()))
      example = tf.train.Example(features=tf.train.Features(feature=entries))
      self.sink.write(example.SerializeToString())


class NpzWriter:
  """A numpy .npz written without holding the arrays in memory.

  numpy.savez needs whole arrays. Here every array is appended batch by batch to a raw file in
  `scratch_dir` (tokens as UTF-8 lines, their widest length tracked); `finish(sink)` then
  writes the zip archive numpy.load reads (uncompressed, like savez, zip64), each entry an .npy
  header, whose shape is known only then, followed by the raw file copied in chunks. The
  scratch space is the size of the output.
  """

  def __init__(self, scratch_dir: str, layers: Sequence[int], hidden_size: int,
               pooling: str = "none"):
    self.scratch_dir = scratch_dir
    self.layers = tuple(layers)
    self.hidden_size = hidden_size
    self.pooling = pooling
    self.num_lines = 0
    self.num_tokens = 0
    self.token_width = 1
    names = [layer_key(i) for i in self.layers] + ["tokens", "token_ids", "input_type_ids",
                                                   "offsets", "unique_ids"]
    self._files = {name: open(os.path.join(scratch_dir, name), "wb") for name in names}
    self._files["offsets"].write(np.zeros(1, "<i8").tobytes())

  def write_batch(self, features: Sequence[InputFeatures], values: np.ndarray) -> None:
    files = self._files
    lengths = [len(feature.tokens) for feature in features]
    tokens = [token for feature in features for token in feature.tokens]
    if tokens:
      self.token_width = max(self.token_width, max(map(len, tokens)))
    files["tokens"].write("".join(t + "\n" for t in tokens).encode("utf-8"))
    for name in ("token_ids", "input_type_ids"):
      column = "input_ids" if name == "token_ids" else name
      flat = [i for feature, n in zip(features, lengths) for i in getattr(feature, column)[:n]]
      files[name].write(np.asarray(flat, "<i4").tobytes())
    files["unique_ids"].write(np.asarray([f.unique_id for f in features], "<i8").tobytes())
    ends = self.num_tokens + np.cumsum(lengths, dtype=np.int64)
    files["offsets"].write(ends.astype("<i8").tobytes())
    for k, index in enumerate(self.layers):
      if self.pooling == "none":
        rows = np.concatenate([values[k, row, :n] for row, n in enumerate(lengths)])
      else:
        rows = values[k, :len(features)]
      files[layer_key(index)].write(np.ascontiguousarray(rows, "<f4").tobytes())
    self.num_lines += len(features)
    self.num_tokens += sum(lengths)

  def close(self) -> None:
    for f in self._files.values():
      f.close()

  def finish(self, sink) -> None:
    """Writes the archive to a seekable binary file-like object."""
    self.close()
    rows = self.num_tokens if self.pooling == "none" else self.num_lines
    shapes = {layer_key(i): ("<f4", (rows, self.hidden_size)) for i in self.layers}
    shapes.update(tokens=(f"<U{self.token_width}", (self.num_tokens,)),
                  token_ids=("<i4", (self.num_tokens,)),
                  input_type_ids=("<i4", (self.num_tokens,)),
                  offsets=("<i8", (self.num_lines + 1,)),
                  unique_ids=("<i8", (self.num_lines,)))
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
      for name, (dtype, shape) in shapes.items():
        with archive.open(name + ".npy", "w", force_zip64=True) as entry:
          np.lib.format.write_array_header_1_0(
              entry, {"descr": dtype, "fortran_order": False, "shape": shape})
          path = os.path.join(self.scratch_dir, name)
          if name == "tokens":
            self._copy_tokens(path, entry, dtype)
          else:
            with open(path, "rb") as raw:
              shutil.copyfileobj(raw, entry, 1 << 22)
      for name, value in (("layers", np.asarray(self.layers, "<i4")),
                          ("pooling", np.asarray(self.pooling))):
        with archive.open(name + ".npy", "w") as entry:
          np.lib.format.write_array(entry, value, allow_pickle=False)

  @staticmethod
  def _copy_tokens(path: str, entry, dtype: str, chunk_lines: int = 1 << 16) -> None:
    with open(path, "rb") as raw:
      chunk = []
      for line in raw:
        chunk.append(line[:-1].decode("utf-8"))
        if len(chunk) == chunk_lines:
          entry.write(np.asarray(chunk, dtype).tobytes())
          chunk = []
      if chunk:
        entry.write(np.asarray(chunk, dtype).tobytes())


@contextlib.contextmanager
def open_writer(output_file: str, output_format: str, layers: Sequence[int], hidden_size: int,
                pooling: str = "none"):
  """A writer for output_file that becomes output_file only when the block succeeds.

  Yields an object with write_batch(features, values). Everything is written under a
  temporary name (bert_tf.io); on an exception nothing is left under output_file.
  """
  if output_format == "jsonl":
    with io.atomic_write(output_file, "wb") as f:
      yield JsonlWriter(f, layers, pooling)
  elif output_format == "tfrecord":
    with record_schema.RecordFileWriter(output_file) as records:
      yield TfRecordWriter(records, layers, pooling)
  elif output_format == "npz":
    # Scratch files beside a local output (same disk, cleaned up like io's temporaries), in the
    # system's temporary directory for gs:// and other remote outputs.
    if io.is_local(output_file):
      scratch = io.temp_name(output_file, ".parts")
      io.remove_if_exists(scratch)
      io.makedirs(scratch)
    else:
      scratch = tempfile.mkdtemp(prefix="extract_features_")
    try:
      writer = NpzWriter(scratch, layers, hidden_size, pooling)
      try:
        yield writer
      finally:
        writer.close()
      if io.is_local(output_file):
        with io.atomic_write(output_file, "wb") as f:
          writer.finish(f)
      else:
        archive = os.path.join(scratch, "archive.npz")
        with open(archive, "wb") as f:
          writer.finish(f)
        io.copy(archive, output_file)
    finally:
      shutil.rmtree(scratch, ignore_errors=True)
  else:
    raise FeatureExtractionError(f"--output_format must be one of {', '.join(OUTPUT_FORMATS)}, "
                                 f"got {output_format!r}")


# === The run ===


class Progress:
  """Logs lines done, lines/s and the ETA at most every `every` seconds (and at the end)."""

  def __init__(self, total: Optional[int], every: float = 30.0,
               clock: Callable[[], float] = time.monotonic):
    self.total = total
    self.every = every
    self.clock = clock
    self.start = clock()
    self.last_log = self.start
    self.done = 0

  def rate(self) -> float:
    elapsed = self.clock() - self.start
    return self.done / elapsed if elapsed > 0 else 0.0

  def message(self) -> str:
    rate = self.rate()
    if self.total:
      eta = (self.total - self.done) / rate if rate > 0 else 0.0
      return (f"{self.done}/{self.total} lines ({100.0 * self.done / self.total:.1f}%), "
              f"{rate:.1f} lines/s, ETA {loop.format_eta(eta)}")
    return f"{self.done} lines, {rate:.1f} lines/s"

  def update(self, count: int) -> None:
    self.done += count
    now = self.clock()
    if now - self.last_log >= self.every:
      self.last_log = now
      logging.info("Extracted %s", self.message())


def run_batches(features: Iterable[InputFeatures], extractor: Callable[..., np.ndarray],
                writer, batch_size: int, progress: Optional[Progress] = None,
                prefetch: bool = True) -> int:
  """Runs the extractor on batches of features and hands each batch's output to the writer
  before the next batch is taken from `features` (at most two batches ahead with prefetch).

  Args:
    features: InputFeatures of one seq_length, e.g. a lazy convert_examples_to_features.
    extractor: a FeatureExtractor (its run_features pads each batch to batch_size).
    writer: has write_batch(features, values).
    batch_size: lines per model call.
    progress: updated after every batch.
    prefetch: tokenize the next batches in a background thread while the model runs.

  Returns:
    The number of features written.
  """
  count = 0
  groups = batches(features, batch_size)
  for batch in (_prefetch(groups) if prefetch else groups):
    values = extractor.run_features(batch, batch_size)
    writer.write_batch(batch, values)
    count += len(batch)
    if progress is not None:
      progress.update(len(batch))
  return count


def config_for(settings: ExtractFeaturesSettings) -> BertConfig:
  """settings.bert_config_file's config, else the one beside settings.init_checkpoint."""
  if settings.bert_config_file:
    return BertConfig.from_json_file(settings.bert_config_file)
  try:
    return checkpoints.config_beside(checkpoints.resolve_checkpoint(settings.init_checkpoint))
  except FileNotFoundError as e:
    raise FeatureExtractionError(f"--bert_config_file is not given and the checkpoint has no "
                                 f"config beside it ({e})") from None


def extract_features(settings: ExtractFeaturesSettings, config: Optional[BertConfig] = None,
                     strategy: Optional[tf.distribute.Strategy] = None) -> Dict[str, Any]:
  """The whole extract_features command: reads settings.input_file, writes settings.output_file.

  Args:
    settings: the run's settings.
    config: the model config; None reads settings.bert_config_file, or the config beside
      settings.init_checkpoint.
    strategy: where the model runs (default: the current strategy).

  Returns:
    A dict: num_lines, output_file, output_format, layers, seconds, lines_per_second,
    real_token_share (real tokens / positions the model computed).

  Raises:
    FeatureExtractionError: bad settings (naming the flag), invalid UTF-8 (file and line), a
      config the sequence length or vocab does not fit, a checkpoint of another model.
    FileNotFoundError: a missing input file or checkpoint.
    provenance.TokenizerMismatchError: a vocab or casing that contradicts the checkpoint's, or
      a vocab larger than the config's.
  """
  settings.check()
  output_format = settings.resolved_output_format()
  # The output never replaces an input, nor (without --overwrite) an existing file.
  run_folder.check_outputs_not_inputs(
      {"--output_file": settings.output_file},
      {"--input_file": settings.input_file, "--vocab_file": settings.vocab_file,
       "--bert_config_file": settings.bert_config_file,
       "--init_checkpoint": settings.init_checkpoint}, error=FeatureExtractionError)
  if io.exists(settings.output_file) and not settings.overwrite:
    raise FeatureExtractionError(f"--output_file={settings.output_file} exists; pass "
                                 "--overwrite to replace it")
  _check_input_file(settings.input_file)
  config = config or config_for(settings)
  layers = parse_layers(settings.layers, config.num_hidden_layers,
                        allow_duplicates=output_format == "jsonl")
  if settings.max_seq_length > config.max_position_embeddings:
    raise FeatureExtractionError(
        f"--max_seq_length={settings.max_seq_length} is longer than the model's "
        f"max_position_embeddings ({config.max_position_embeddings})")
  tokenizer = tokenization.FullTokenizer(settings.vocab_file, settings.do_lower_case)
  provenance.check_tokenizer(settings.vocab_file, settings.do_lower_case,
                             checkpoints=[settings.init_checkpoint], vocab_size=config.vocab_size,
                             vocab_tokens=len(tokenizer.vocab),
                             allow_mismatch=settings.allow_tokenizer_mismatch)
  strategy = strategy or tf.distribute.get_strategy()
  if settings.batch_size % strategy.num_replicas_in_sync:
    raise FeatureExtractionError(f"--batch_size={settings.batch_size} must be a multiple of "
                                 f"the {strategy.num_replicas_in_sync} replicas")
  total = count_lines(settings.input_file)
  if not total:
    logging.warning("--input_file=%s is empty: the output holds no example",
                    settings.input_file)
  logging.info("%d lines in %s; layers %s, pooling %s, %s output%s", total,
               settings.input_file, ",".join(map(str, layers)), settings.pooling, output_format,
               ", packed rows" if settings.packing == row_packing.EXACT else "")
  with loop.dtype_policy(settings.mixed_precision):
    with strategy.scope():
      # Packed: only the packed encoder is built (the same weights; one copy in memory).
      encoder = load_encoder(config, settings.init_checkpoint,
                             packed=settings.packing == row_packing.EXACT)
    extractor = FeatureExtractor(
        encoder, layers, settings.pooling, strategy, settings.jit_compile,
        length_buckets_lib.parse(settings.length_buckets, settings.max_seq_length),
        packing=settings.packing)
  io.remove_stale_temp_files(settings.output_file)
  progress = Progress(total, settings.log_every_seconds)
  features = convert_examples_to_features(read_examples(settings.input_file),
                                          settings.max_seq_length, tokenizer)
  with open_writer(settings.output_file, output_format, layers, config.hidden_size,
                   settings.pooling) as writer:
    count = run_batches(features, extractor, writer, settings.batch_size, progress)
  seconds = time.monotonic() - progress.start
  logging.info("Extracted %s; wrote %s", progress.message(), settings.output_file)
  share = extractor.real_positions / max(extractor.computed_positions, 1)
  logging.info("Real tokens: %s of %s computed positions (%.1f%%, --packing=%s)",
               f"{extractor.real_positions:,}", f"{extractor.computed_positions:,}",
               100.0 * share, settings.packing)
  return dict(num_lines=count, output_file=settings.output_file, output_format=output_format,
              layers=layers, seconds=seconds, lines_per_second=count / seconds if seconds else 0.0,
              real_token_share=share)
