"""extract_features as a library: text lines -> the hidden states of chosen BERT layers.

What carries over from the original release (google-research/bert, extract_features.py):

* Input: one example per line, read to the end of the file as UTF-8 and stripped. A line
  matching `^(.*) \\|\\|\\| (.*)$` is a pair, split at its **last** " ||| " (the first group is
  greedy); any other line, the empty one included, is a single text. unique_id is the 0-based
  line number. Lines end at "\\n" only ("\\r" is stripped with the other whitespace).
* Features: `[CLS] A [SEP]` (input_type_ids 0) then `B [SEP]` (1) when B has WordPieces, with
  the classifier's truncation (pairs.truncate_seq_pair); a single text is cut to
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

import time
from typing import Any, Callable, Dict, Iterable, Optional

from absl import logging
import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf import length_buckets as length_buckets_lib
from bert_tf import tokenization
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model import provenance
from bert_tf.tasks.features.extractor import FeatureExtractor, load_encoder
from bert_tf.training import run_folder
from bert_tf.tasks.features.inputs import (InputFeatures, batches, check_input_file,
                                           convert_examples_to_features, count_lines,
                                           prefetched, read_examples)
from bert_tf.tasks.features.settings import (ExtractFeaturesSettings, FeatureExtractionError,
                                              layers_for_config)
from bert_tf.tasks.features.writers import open_writer
from bert_tf.training import distribution
from bert_tf.training import loop


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
  for batch in (prefetched(groups) if prefetch else groups):
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
  check_input_file(settings.input_file)
  config = config or config_for(settings)
  layers = layers_for_config(settings, config)
  tokenizer = tokenization.FullTokenizer(settings.vocab_file, settings.do_lower_case)
  provenance.check_tokenizer(settings.vocab_file, settings.do_lower_case,
                             checkpoints=[settings.init_checkpoint], vocab_size=config.vocab_size,
                             vocab_tokens=tokenization.id_count(tokenizer.vocab),
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
               ", packed rows" if settings.packing_mode.exact else "")
  with distribution.dtype_policy(settings.mixed_precision):
    with strategy.scope():
      # Packed: only the packed encoder is built (the same weights; one copy in memory).
      encoder = load_encoder(config, settings.init_checkpoint,
                             packed=settings.packing_mode.exact)
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
