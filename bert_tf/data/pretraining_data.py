"""The library half of data_prep/create_pretraining_data.py: text -> pretraining TFRecords.

`run(DataConfig(...))` reads one-sentence-per-line text (blank lines between documents), makes
masked-LM / next-sentence instances as the original create_pretraining_data.py does, and writes
them with a metadata file beside each output. With reproduce_original the records equal the
original's for the same input, vocab, flags and seed (same examples, same order). By default
the corpus is streamed in blocks of documents made into instances by all cores (the same
algorithm within each block, masked positions drawn lazily; the output depends on the seed and
block_size_mb, not on num_workers). Local paths never import TensorFlow.

Reliability decisions:

* No empty record files. Instances go round-robin over the outputs (as in the original, in both
  modes), so with fewer instances than outputs only the first ones get records. How many
  instances a corpus makes is only known at the end, so this cannot be refused up front;
  instead only the outputs with records are written, a warning says so, and their metadata
  lists the outputs not written (`counts.outputs_not_written`). With output_dir the shards are
  named after the number written (`pretraining-00000-of-00077.tfrecord` when 200 were asked
  for and 77 instances were made); with an output_files list the first files are written and
  the rest are not created (an empty or, with overwrite, older file of such a name is
  removed). Every written file holds the same records as in a run with that many outputs, and
  with reproduce_original the same records as the original's file of that name (the original
  would also have created the empty ones, on which training spins forever).
* Commit. Records and metadata are complete under temporary names before anything final is
  touched, and the final renames are journaled (writer.RecordWriter.commit): a run killed
  while committing leaves a journal, and the next run on the same outputs rolls that commit
  back before its checks, so the same command simply works again (no --overwrite needed for
  what only the killed run made). Final record files without metadata and without a journal
  (e.g. the original script's output) still need --overwrite.
* Outputs that are one file under two spellings, or an output named like another output's
  metadata file, are refused up front, naming both.
* Lines longer than LONG_LINE_BYTES_PER_TOKEN * 100 * max_seq_length bytes get a warning naming
  file and line: the algorithm (the original's, kept) uses only about max_seq_length tokens of
  such a line. The count is in the metadata (`counts.long_lines`).
"""

import collections
import contextlib
import dataclasses
import multiprocessing
import os
import random
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from absl import logging

from bert_tf import io
from bert_tf import record_schema
from bert_tf import tokenization
from bert_tf.data import corpus
from bert_tf.data import instances as instances_lib
from bert_tf.data import writer as writer_lib

PROGRAM = "bert_tf/data_prep/create_pretraining_data.py"
PROGRAM_VERSION = "0.1.0"


class UsageError(ValueError):
  """Inconsistent or unusable flags; the message names the flag."""


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Everything one run needs; the fields are the command's flags (lists already split)."""

  input_patterns: Tuple[str, ...]
  output_files: Tuple[str, ...]  # empty when output_dir is given
  vocab_file: str
  do_lower_case: bool = True
  do_whole_word_mask: bool = False
  max_seq_length: int = 128
  max_predictions_per_seq: int = 20
  random_seed: int = 12345
  dupe_factor: int = 10
  masked_lm_prob: float = 0.15
  short_seq_prob: float = 0.1
  reproduce_original: bool = False
  compression: str = ""
  use_v2_feature_names: bool = False
  overwrite: bool = False
  errors: str = "strict"
  num_workers: int = 0
  block_size_mb: float = 1.0
  output_dir: str = ""
  num_output_shards: int = 1
  segmented_input: bool = False

  def resolved_output_files(self) -> List[str]:
    """The record files to write: the output_file list, or output_dir's shard names.

    Raises:
      UsageError: both or neither of output_files and output_dir, or shards without a folder.
    """
    if self.output_files and self.output_dir:
      raise UsageError("--output_file and --output_dir are mutually exclusive: give a list of "
                       "files, or a folder and --num_output_shards")
    if self.output_dir:
      try:
        return writer_lib.shard_paths(self.output_dir, self.num_output_shards,
                                      self.compression)
      except writer_lib.OutputError as e:
        raise UsageError(str(e)) from None
    if self.num_output_shards != 1:
      raise UsageError("--num_output_shards needs --output_dir (with --output_file the number "
                       "of outputs is the length of its list)")
    if not self.output_files:
      raise UsageError("one of --output_file or --output_dir is required")
    return list(self.output_files)

  def instance_options(self) -> instances_lib.InstanceOptions:
    try:
      return instances_lib.InstanceOptions(
          max_seq_length=self.max_seq_length,
          max_predictions_per_seq=self.max_predictions_per_seq,
          masked_lm_prob=self.masked_lm_prob,
          short_seq_prob=self.short_seq_prob,
          dupe_factor=self.dupe_factor,
          do_whole_word_mask=self.do_whole_word_mask,
          # The default mode's records differ from the original's anyway (blocks); it only
          # needs the same distribution, and the lazy draws save a fifth of its time.
          exact_draws=self.reproduce_original,
          word_tags=self.segmented_input)
    except instances_lib.InstanceOptionsError as e:
      raise UsageError(str(e)) from None

  def flag_values(self) -> Dict[str, Any]:
    """The flags as the command line spells them (recorded in the metadata)."""
    values = dataclasses.asdict(self)
    values["input_file"] = ",".join(values.pop("input_patterns"))
    values["output_file"] = ",".join(values.pop("output_files"))
    return values


# A line longer than this many bytes per token times 100 * max_seq_length is warned about: about
# 100 instances' worth of English (~4-5 bytes per WordPiece token; CJK ~3), of which one is used.
LONG_LINE_BYTES_PER_TOKEN = 4
_LONG_LINE_WARNINGS = 10  # then only counted (and summed up at the end)


class LongLines:
  """Counts lines over max_line_bytes and warns about the first few, naming file and line."""

  def __init__(self, max_line_bytes: int):
    self.max_line_bytes = max_line_bytes
    self.count = 0

  def __call__(self, path: str, line_number: Callable[[], int], size: int) -> None:
    """corpus.iter_lines' and iter_piece_lines' on_long_line: the line number is looked up
    only for the lines warned about."""
    self.count += 1
    if self.count > _LONG_LINE_WARNINGS:
      return
    logging.warning(
        "%s:%d: a line of %d bytes (over %d): only about --max_seq_length tokens of one line "
        "reach an instance, the rest of it is not used (the original algorithm; the default "
        "mode tokenizes only the line's first %d characters); put one sentence per line%s",
        path, line_number(), size, self.max_line_bytes, self.max_line_bytes,
        "" if self.count < _LONG_LINE_WARNINGS else " (further long lines are only counted)")

  def log_total(self) -> None:
    if self.count:
      logging.warning("%d line(s) were longer than %d bytes: only their beginning was used",
                      self.count, self.max_line_bytes)


def long_lines_for(config: "DataConfig") -> LongLines:
  return LongLines(LONG_LINE_BYTES_PER_TOKEN * 100 * config.max_seq_length)


class _Progress:
  """Logs documents/s, instances/s and the ETA at most every `interval` seconds."""

  def __init__(self, interval: float = 10.0):
    self.start = time.time()
    self.last = 0.0
    self.interval = interval

  def __call__(self, done: int, total: int, made: int) -> None:
    now = time.time()
    if now - self.last < self.interval and done < total:
      return
    self.last = now
    elapsed = max(now - self.start, 1e-9)
    eta = (total - done) * elapsed / max(done, 1)
    logging.info("instances: %d/%d documents (all passes), %d instances, %.0f docs/s, "
                 "%.0f instances/s, ETA %.0f s", done, total, made, done / elapsed,
                 made / elapsed, eta)


def validate(config: DataConfig) -> instances_lib.InstanceOptions:
  """Checks the flags that need no file; returns the instance options.

  Raises:
    UsageError: naming the flag.
  """
  options = config.instance_options()
  if config.errors not in corpus.ERRORS_MODES:
    raise UsageError(f"--errors must be one of {', '.join(corpus.ERRORS_MODES)}, "
                     f"got {config.errors!r}")
  if config.compression not in writer_lib.COMPRESSION_TYPES:
    raise UsageError(f"--compression must be '' or GZIP, got {config.compression!r}")
  if config.num_workers < 0:
    raise UsageError(f"--num_workers must be >= 0 (0 = all cores), got {config.num_workers}")
  # `not x > 0` also refuses nan; inf would overflow int(); a window is 64 blocks.
  if not 0 < config.block_size_mb <= MAX_BLOCK_SIZE_MB:
    raise UsageError(f"--block_size_mb must be a number in (0, {MAX_BLOCK_SIZE_MB}], got "
                     f"{config.block_size_mb}")
  return options


MAX_BLOCK_SIZE_MB = 1024


def resolve_files(config: DataConfig) -> Tuple[List[str], List[str], str]:
  """(input files, output files, the output flag's name): globs expanded, outputs distinct.

  Raises:
    UsageError, corpus.InputError, writer_lib.OutputError.
  """
  output_files = config.resolved_output_files()
  # The original reads each glob's matches in directory order; the default mode sorts them so
  # its output does not depend on the filesystem.
  input_files = corpus.expand_input_files(config.input_patterns,
                                         sort=not config.reproduce_original)
  flag = "--output_dir" if config.output_dir else "--output_file"
  writer_lib.check_distinct_outputs(output_files, flag, input_files)
  return input_files, output_files, flag


def lock_directories(config: DataConfig, output_files: List[str]) -> List[str]:
  """The folders a run locks: --output_dir, or the folder of each --output_file."""
  if config.output_dir:
    return [config.output_dir]
  return sorted({os.path.dirname(p) or "." for p in output_files})


@contextlib.contextmanager
def output_locks(config: DataConfig, output_files: List[str], flag: str,
                 program: str = "create_pretraining_data") -> Iterator[None]:
  """Holds io.directory_lock on every output folder for the block: one run per folder.

  A second run on the same folder fails at once (io.DirectoryInUseError, naming the run that
  holds it); a lock left by a killed run of this host is taken over. The lock file
  (io.LOCK_NAME) is hidden and never matches a shard name or an input glob.

  Raises:
    writer_lib.OutputError: a folder that cannot be created, naming the flag.
    io.DirectoryInUseError: another live run holds a folder.
  """
  with contextlib.ExitStack() as stack:
    for directory in lock_directories(config, output_files):
      if io.exists(directory) and not io.isdir(directory):
        raise writer_lib.OutputError(f"{flag}: {directory} exists and is not a folder")
      try:
        stack.enter_context(io.directory_lock(directory, program))
      except io.DirectoryInUseError as e:
        raise io.DirectoryInUseError(f"{flag}: {e}") from None
      except Exception as e:  # pylint: disable=broad-except
        # OSError locally, tf.errors.OpError on other filesystems.
        raise writer_lib.OutputError(
            f"{flag}: cannot create or lock the folder {directory}: "
            f"{getattr(e, 'message', None) or e}") from None
    yield


def check_outputs(config: DataConfig, output_files: List[str], flag: str) -> List[str]:
  """Rolls back a killed run's commit, refuses existing outputs; returns stale shards.

  Raises:
    writer_lib.OutputError: naming the file and the flag (--overwrite where it helps).
  """
  # A run killed while committing to these outputs left a journal: undo that commit first, so
  # its half-renamed files neither block this run nor mix with its outputs.
  for journal, removed in writer_lib.recover_interrupted_commits(
      output_files, config.output_dir, config.overwrite, flag):
    logging.warning("Rolled back the unfinished commit of a killed run (%s): removed %d "
                    "file(s)", journal, len(removed))
  stale_shards = []
  if config.output_dir:
    stale_shards = writer_lib.check_output_dir(config.output_dir, output_files, config.overwrite)
  writer_lib.check_outputs(output_files, config.overwrite, flag=flag)
  return stale_shards


def load_vocab(config: DataConfig):
  """(tokenizer, VocabTables, vocab md5) of --vocab_file.

  Raises:
    UsageError: an unreadable vocab file, or one without the special tokens.
  """
  try:
    tokenizer = tokenization.FullTokenizer(config.vocab_file, do_lower_case=config.do_lower_case)
  except (OSError, ValueError) as e:
    raise UsageError(f"--vocab_file: {e}") from None
  vocab = instances_lib.VocabTables(tokenizer.vocab, source=f"--vocab_file={config.vocab_file}")
  if "" in tokenizer.vocab:
    logging.warning(
        "--vocab_file=%s: line %d is blank, the token \"\" (id %d): no text produces it, but "
        "masking draws it as a random replacement, as the original does, so the data needs a "
        "model whose vocab_size is at least %d (the metadata records it); remove the line "
        "if the model's is smaller", config.vocab_file, tokenizer.vocab[""] + 1,
        tokenizer.vocab[""], vocab.size)
  return tokenizer, vocab, record_schema.vocab_checksum(config.vocab_file)


def make_counts(report: corpus.ReadReport, stats: writer_lib.InstanceStats, input_files,
                long_lines: int) -> Dict[str, int]:
  """The run's counts as the metadata records them."""
  return {
      "input_files": len(input_files),
      "documents": report.documents,
      "lines": report.lines,
      "tokens": report.tokens,
      "invalid_utf8_lines": report.invalid_utf8_lines,
      "skipped_lines": report.skipped_lines,
      "long_lines": long_lines,
      "instances": stats.instances,
      "masked_tokens": stats.masked,
      "random_next": stats.random_next,
      "full_length": stats.full_length,
  }


def make_metadata(config: DataConfig, counts: Dict[str, Any], vocab, vocab_md5: str,
                  output_files: List[str], final_files: List[Optional[str]],
                  file_counts: List[int], extra_flags: Optional[Dict[str, Any]] = None
                  ) -> List[Optional[Dict[str, Any]]]:
  """The metadata of each output (None for one not written), as record_schema.make_metadata."""
  written = [f for f in final_files if f]
  not_written = [p for p, f in zip(output_files, final_files) if not f]
  extra = {"outputs_not_written": not_written} if not_written else {}
  flags = dict(config.flag_values(), **(extra_flags or {}))
  return [None if final is None else record_schema.make_metadata(
      max_seq_length=config.max_seq_length,
      max_predictions_per_seq=config.max_predictions_per_seq,
      use_v2_feature_names=config.use_v2_feature_names,
      vocab_size=len(vocab.replacement_ids), vocab_md5=vocab_md5,
      do_lower_case=config.do_lower_case, do_whole_word_mask=config.do_whole_word_mask,
      flags=flags, counts=dict(counts, instances_in_file=count, output_files=written, **extra),
      program_version=f"{PROGRAM} {PROGRAM_VERSION}", compression=config.compression)
          for final, count in zip(final_files, file_counts)]


def make_summary(stats: writer_lib.InstanceStats, documents: int, sizes: List[int],
                 output_files: List[str], read_seconds: Optional[float],
                 instance_seconds: float, start: float) -> Dict[str, Any]:
  """The figures format_summary prints."""
  total_seconds = time.time() - start
  summary = stats.summary()
  summary.update(documents=documents, output_bytes=sum(sizes), output_files=output_files,
                 read_seconds=read_seconds, instance_seconds=instance_seconds,
                 total_seconds=total_seconds,
                 instances_per_second=stats.instances / max(total_seconds, 1e-9))
  return summary


def run(config: DataConfig) -> Dict[str, Any]:
  """Reads, tokenizes, makes instances and writes them with metadata; returns the summary.

  Holds the lock of every output folder for the whole run (output_locks).

  Raises:
    UsageError, corpus.InputError, writer_lib.OutputError, io.DirectoryInUseError,
      ValueError: bad flags, input or outputs, with a message naming the flag, file or line.
  """
  options = validate(config)
  input_files, output_files, flag = resolve_files(config)
  with output_locks(config, output_files, flag):
    stale_shards = check_outputs(config, output_files, flag)
    start = time.time()
    tokenizer, vocab, vocab_md5 = load_vocab(config)

    # Open the outputs before the long part, so an unwritable destination fails at once.
    with writer_lib.RecordWriter(output_files, config.compression, flag=flag) as writer:
      logging.info("Reading %d input file(s)", len(input_files))
      if config.reproduce_original:
        report, stats, read_seconds, long_lines = _write_reference(
            config, options, tokenizer, vocab, input_files, writer, start)
      else:
        report, stats, read_seconds, long_lines = _write_default(config, input_files,
                                                                 tokenizer, writer, start)
      writer.finish_writing()
      instance_seconds = time.time() - start - (read_seconds or 0.0)

      final_files, remove = final_layout(config, output_files, stale_shards, writer.counts,
                                         stats.instances, input_files)
      counts = make_counts(report, stats, input_files, long_lines.count)
      metadata = make_metadata(config, counts, vocab, vocab_md5, output_files, final_files,
                               writer.counts)
      # Records and metadata are complete under temporary names before anything final
      # changes; the renames (records, then metadata) are journaled: see
      # writer.RecordWriter.commit. Shards of an earlier layout (--overwrite only) go in the
      # same commit: a reader globbing the folder never sees old and new shards together once
      # the run has finished.
      sizes = writer.commit(final_files, metadata, remove=remove)

  long_lines.log_total()
  return make_summary(stats, report.documents, sizes, [f for f in final_files if f],
                      read_seconds, instance_seconds, start)


def final_layout(config, output_files, stale_shards, counts, instances, input_files):
  """(final name or None for each output, files to remove in the commit): no empty outputs.

  See the module docstring: only outputs with records are written; output_dir's shards are
  then named after how many there are.

  Raises:
    corpus.InputError: no instances at all (nothing to write).
  """
  if not instances:
    raise corpus.InputError(
        f"--input_file: {', '.join(input_files)} made no instances (every document is too "
        f"short?); nothing was written")
  kept = sum(1 for c in counts if c)
  # Round-robin from the first output: the outputs with records are the first `kept`.
  assert all(counts[:kept]) and not any(counts[kept:]), counts
  if kept == len(output_files):
    finals = list(output_files)
  elif config.output_dir:
    finals = writer_lib.shard_paths(config.output_dir, kept, config.compression)
    finals += [None] * (len(output_files) - kept)
  else:
    finals = list(output_files[:kept]) + [None] * (len(output_files) - kept)
  not_written = output_files[kept:]
  if not_written:
    logging.warning(
        "%d instance(s) for %d output files: writing only %d (an empty record file would make "
        "training wait forever)%s; not written: %s%s", instances, len(output_files), kept,
        f", named {os.path.basename(finals[0])} ..." if config.output_dir else "",
        ", ".join(not_written[:3]), " ..." if len(not_written) > 3 else "")
  # Files that would contradict the new outputs once committed: earlier shards of another
  # layout (checked up front: empty, or --overwrite) and outputs not written this time (empty,
  # or --overwrite), each with its metadata.
  written = [f for f in finals if f]
  candidates = set(stale_shards)
  for path in not_written:
    candidates.update((path, record_schema.metadata_path(path)))
  if config.output_dir:
    found = writer_lib.foreign_shards(config.output_dir, written)
  else:
    found = [p for p in sorted(candidates) if io.exists(p)]
  return finals, [p for p in found if p in candidates]


def check_documents(report, num_documents, input_files):
  corpus.warn_read_problems(report)
  if not num_documents:
    raise corpus.InputError(
        f"--input_file: no text found in {', '.join(input_files)} (every file is empty or "
        f"blank)")
  if num_documents == 1:
    logging.warning("The corpus has a single document: next-sentence prediction needs two, so "
                    "every 'random next' segment will come from the same document")


def _write_reference(config, options, tokenizer, vocab, input_files, writer, start):
  """The original algorithm: the whole corpus in memory, one generator, one final shuffle."""

  def read_progress(next_path, report):
    elapsed = max(time.time() - start, 1e-9)
    logging.info("read %d/%d files, %d lines, %.1f MB (%.2f MB/s)%s", report.files,
                 len(input_files), report.lines, report.bytes / 1e6,
                 report.bytes / 1e6 / elapsed, f"; next {next_path}" if next_path else "")

  tokenize = tokenizer.tokenize_to_ids
  if config.segmented_input:
    tokenize = instances_lib.tag_words(tokenize, vocab.size)
  long_lines = long_lines_for(config)
  documents, report = instances_lib.read_documents(
      input_files, tokenize, errors=config.errors, progress=read_progress,
      max_line_bytes=long_lines.max_line_bytes, on_long_line=long_lines)
  read_seconds = time.time() - start
  check_documents(report, len(documents), input_files)
  logging.info("Read %d documents, %d lines, %d tokens in %.1f s", report.documents,
               report.lines, report.tokens, read_seconds)

  encoder = record_schema.ExampleEncoder(config.max_seq_length, config.max_predictions_per_seq,
                                         vocab.size, config.use_v2_feature_names)
  serializer = writer_lib.Serializer(encoder)
  rng = random.Random(config.random_seed)
  records = instances_lib.create_training_instances(
      documents, options, vocab, rng, transform=serializer, progress=_Progress(),
      progress_every=20)
  del documents
  for record in records:
    writer.write(record)
  return report, serializer.stats, read_seconds, long_lines


# --- Default mode: the block plan (instances.plan_windows), blocks made in parallel ---


@dataclasses.dataclass
class BlockResult:
  """What one block made: its records (in order) and its counts."""

  records: List[bytes]
  stats: writer_lib.InstanceStats
  documents: int
  segments: int
  tokens: int


class BlockMaker:
  """Turns one block of text documents into serialised records; one per process.

  Shared by the local mode's worker processes and the Beam pipeline's workers, so both make
  the same records from the same block. Building it scans all of Unicode (the tokenizer's
  character classes): once per process, not per block.
  """

  def __init__(self, config: DataConfig, tokenizer=None):
    if tokenizer is None:
      tokenizer = tokenization.FullTokenizer(config.vocab_file,
                                             do_lower_case=config.do_lower_case)
    self.config = config
    self.vocab = instances_lib.VocabTables(tokenizer.vocab, source=config.vocab_file)
    self.options = config.instance_options()
    self.encoder = record_schema.ExampleEncoder(config.max_seq_length,
                                                config.max_predictions_per_seq, self.vocab.size,
                                                config.use_v2_feature_names)
    self.tokenize = tokenizer.tokenize_to_ids
    if config.segmented_input:
      self.tokenize = instances_lib.tag_words(self.tokenize, self.vocab.size)
    # Only the beginning of a line over the long-line limit is tokenized (such lines are
    # warned about): the algorithm uses about max_seq_length tokens of a line anyway, and
    # tokenizing all of a 20 MB line took ~20x its size in memory (token lists of Python ints).
    self.max_line_chars = long_lines_for(config).max_line_bytes

  def _clipped(self, lines: List[str]) -> List[str]:
    limit = self.max_line_chars
    return [line[:limit] if len(line) > limit else line for line in lines]

  def __call__(self, key: Tuple[int, int], text_documents: List[List[str]]) -> BlockResult:
    """key: (window index, block index) of the plan; text_documents: its stripped lines."""
    tokenize = self.tokenize
    documents = []
    segments = tokens = 0
    for text_document in text_documents:
      document = [ids for ids in map(tokenize, self._clipped(text_document)) if ids]
      if document:
        documents.append(document)
        segments += len(document)
        tokens += sum(map(len, document))
    serializer = writer_lib.Serializer(self.encoder)
    records = []
    if documents:
      rng = instances_lib.block_rng(self.config.random_seed, *key)
      records = instances_lib.create_training_instances(documents, self.options, self.vocab,
                                                        rng, transform=serializer)
    return BlockResult(records, serializer.stats, len(documents), segments, tokens)


def block_bytes(config: DataConfig) -> int:
  return max(1, int(config.block_size_mb * 1e6))


_WORKER_STATE = {}


def _init_block_worker(config: DataConfig, tokenizer=None) -> None:
  _WORKER_STATE["maker"] = BlockMaker(config, tokenizer)


def _make_block(task) -> BlockResult:
  key, text_documents = task
  return _WORKER_STATE["maker"](key, text_documents)


def _write_default(config, input_files, tokenizer, writer, start):
  """The plan's blocks, read here, made by worker processes, written in plan order."""
  num_workers = config.num_workers or os.cpu_count() or 1
  report = corpus.ReadReport()
  long_lines = long_lines_for(config)
  stats = writer_lib.InstanceStats(config.max_seq_length)
  sizes = [io.size(p) for p in input_files]
  for path, size in zip(input_files, sizes):
    if not size:  # no piece reads it: counted here
      report.files += 1
      report.empty_files.append(path)
  blocks = instances_lib.iter_text_blocks(
      input_files, sizes, block_bytes(config), config.errors, report,
      random_seed=config.random_seed, max_line_bytes=long_lines.max_line_bytes,
      on_long_line=long_lines)
  total_bytes = sum(sizes)
  last_log = [0.0]
  # The input bytes behind each block in flight, in plan order (the order results arrive in):
  # progress counts the text that has become records, not the text read ahead of them.
  block_sizes = collections.deque()
  made_bytes = [0.0]

  def tasks():
    for key, block, size in blocks:
      block_sizes.append(size)
      yield key, block

  def collect(result: BlockResult):
    made_bytes[0] += block_sizes.popleft()
    for record in result.records:
      writer.write(record)
    stats.merge(result.stats)
    report.documents += result.documents
    report.segments += result.segments
    report.tokens += result.tokens
    now = time.time()
    if now - last_log[0] > 10:
      last_log[0] = now
      elapsed = max(now - start, 1e-9)
      done = min(1.0, made_bytes[0] / max(total_bytes, 1))
      logging.info("%.1f%% of the input, %d documents, %d instances, %.0f docs/s, "
                   "%.0f instances/s, ETA %.0f s", 100 * done, report.documents,
                   stats.instances, report.documents / elapsed, stats.instances / elapsed,
                   elapsed * (1 - done) / max(done, 1e-9))

  if num_workers == 1:
    _init_block_worker(config, tokenizer)
    for task in tasks():
      collect(_make_block(task))
  else:
    # Fork is cheap and safe while TensorFlow is not loaded (local paths never load it).
    method = "fork" if "tensorflow" not in sys.modules else "spawn"
    context = multiprocessing.get_context(method)
    if method == "fork":
      _init_block_worker(config, tokenizer)  # inherited by the workers
      initializer, initargs = None, ()
    else:
      initializer, initargs = _init_block_worker, (config,)
    with context.Pool(num_workers, initializer=initializer, initargs=initargs) as pool:
      # At most a few blocks in flight: memory stays bounded, order is the plan's.
      in_flight = collections.deque()
      for task in tasks():
        in_flight.append(pool.apply_async(_make_block, (task,)))
        if len(in_flight) >= 2 * num_workers:
          collect(in_flight.popleft().get())
      while in_flight:
        collect(in_flight.popleft().get())
  _WORKER_STATE.clear()  # the main process's copy: no longer needed
  check_documents(report, report.documents, input_files)
  return report, stats, None, long_lines  # reading is pipelined with everything else


def format_summary(summary: Dict[str, Any]) -> str:
  """The end-of-run table printed by the command."""
  if summary["read_seconds"] is None:
    phases = "read, tokenize, instances and writing pipelined"
  else:
    phases = (f"read+tokenize {summary['read_seconds']:.1f} s, instances "
              f"{summary['instance_seconds']:.1f} s")
  return "\n".join([
      f"  documents             {summary['documents']:,}",
      f"  instances             {summary['instances']:,}",
      f"  mean length           {summary['mean_length']:.1f} tokens",
      f"  full-length fraction  {summary['full_length_fraction']:.1%}",
      f"  mean masked tokens    {summary['mean_masked_tokens']:.2f}",
      f"  random-next fraction  {summary['random_next_fraction']:.1%}",
      f"  output size           {summary['output_bytes']:,} bytes",
      f"  time                  {summary['total_seconds']:.1f} s ({phases}), "
      f"{summary['instances_per_second']:.0f} instances/s",
  ])
