"""What every fine-tuning command shares: its settings, its tokenizer, its run folder.

What a model folder records (task_info.json, the tokenizer, the head kinds) and the one
tokenizer check are bert_tf.model.provenance's.
"""

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from absl import logging

from bert_tf import io
from bert_tf import length_buckets as length_buckets_lib
from bert_tf import record_schema
from bert_tf import tokenization
from bert_tf.model import provenance
from bert_tf.training import loop

TASK_INFO_FILE = provenance.TASK_INFO_FILE
# A run's exports: <output_dir>/export/<model name>/<version>/ (TF Serving's layout).
EXPORT_DIR = "export"


@dataclasses.dataclass(frozen=True, kw_only=True)
class FineTuningSettings:
  """The settings every fine-tuning run shares (keyword-only; the task's settings add theirs).

  The original's: init_checkpoint, do_lower_case, do_train, train_batch_size, learning_rate,
  num_train_epochs, warmup_proportion, save_checkpoints_steps, iterations_per_loop, use_tpu.
  Additions: optimizer ("adamw" as the original, or "lamb"); mixed_precision, jit_compile,
  gradient_accumulation_steps, seed (weights of the head, dropout and the data order),
  keep_checkpoint_max, max_nonfinite_steps and shuffle_buffer_size (the original's 100) as in
  run_pretraining; export (a TF Serving model at the end of training);
  allow_tokenizer_mismatch.
  """
  init_checkpoint: Optional[str] = None
  do_lower_case: bool = True
  do_train: bool = False
  train_batch_size: int = 32
  learning_rate: float = 5e-5
  num_train_epochs: float = 3.0
  warmup_proportion: float = 0.1
  save_checkpoints_steps: int = 1000
  iterations_per_loop: int = 1000
  use_tpu: bool = False
  optimizer: str = "adamw"
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
    from bert_tf.training import input_pipeline  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    multiple = 8 if tf.config.list_physical_devices("GPU") else 1
    counts = input_pipeline.length_counts(records, max_seq_length)
    fitted = length_buckets_lib.fit_buckets(counts, max(rows, 1), max_seq_length,
                                            multiple=multiple)
    if sum(counts):
      distribution = length_buckets_lib.batch_longest_distribution(counts, max(rows, 1))
      logging.info("  Length buckets fitted to %s (%d records, batches of %d per replica): "
                   "%s; expected %.1f positions per batch, %.1f with the fixed ladder, %.1f "
                   "at the longest row", records, sum(counts), rows, ",".join(map(str, fitted)),
                   length_buckets_lib.expected_width(distribution, fitted),
                   length_buckets_lib.expected_width(distribution, boundaries),
                   sum(length * p for length, p in enumerate(distribution)))
    return fitted

  def grouped(self, max_seq_length: int) -> bool:
    """Whether training batches are grouped by length: group_by_length with length buckets.
    At a fixed length (--length_buckets=none, TPUs) grouping would save nothing, so the
    training order is then the original's plain shuffle."""
    return self.group_by_length and self.buckets(max_seq_length) is not None

  def __post_init__(self):
    # A model folder (Hugging Face's, a release's, an export) as --vocab_file: its vocab.txt.
    if getattr(self, "vocab_file", None):
      object.__setattr__(self, "vocab_file", provenance.resolve_vocab_file(self.vocab_file))


def run_tokenizer(config, settings, resuming: bool):
  """The FullTokenizer of a fine-tuning run (settings.vocab_file, settings.do_lower_case) and
  the vocab's md5, after checking that the vocab fits the config and agrees with what
  settings.init_checkpoint and, when resuming, settings.output_dir were trained with
  (provenance.check_tokenizer)."""
  tokenizer = tokenization.FullTokenizer(settings.vocab_file, settings.do_lower_case)
  vocab_md5 = record_schema.vocab_checksum(settings.vocab_file)
  # output_dir's record counts when it holds checkpoints: a failed run's leaves no constraint.
  resuming = resuming and holds_checkpoints(settings.output_dir)
  provenance.check_tokenizer(
      settings.vocab_file, settings.do_lower_case,
      checkpoints=[settings.init_checkpoint, settings.output_dir if resuming else None],
      vocab_size=config.vocab_size, vocab_tokens=len(tokenizer.vocab),
      allow_mismatch=settings.allow_tokenizer_mismatch, vocab_md5=vocab_md5)
  return tokenizer, vocab_md5


def prepare_output_dir(config, settings, strategy, chief: bool) -> str:
  """Starts a fine-tuning run's output_dir once its inputs are known to be good.

  Creates output_dir; other workers write their records to a scratch directory of their own.
  Seeds Keras with settings.seed when given. The record of the run (bert_config.json,
  task_info.json) is written later, by record_run_info, once the model is known to load.

  Returns:
    The directory this process writes its records to.
  """
  # Nothing is written to output_dir before a resume is known to fit its checkpoints.
  loop.check_resume_compatible(settings.output_dir, config, settings)
  io.makedirs(settings.output_dir)
  record_dir = settings.output_dir if chief else io.join(
      settings.output_dir, f".worker_{strategy.cluster_resolver.task_id}_records")
  io.makedirs(record_dir)
  if settings.seed is not None:
    import keras  # pylint: disable=g-import-not-at-top
    keras.utils.set_random_seed(settings.seed)
  return record_dir


class OutputDirRun:
  """`with OutputDirRun(config, settings, strategy, chief, program) as record_dir:` holds the
  run directory's lock (loop.run_directory_lock), prepares it (prepare_output_dir) and, when
  the run fails (an exception, an interrupt) while output_dir holds no checkpoint, removes what
  the run created there, so that a failed run leaves nothing behind for the next one to trip
  on. What was there before is left as it was."""

  def __init__(self, config, settings, strategy, chief: bool, program: str):
    self._args = (config, settings, strategy, chief)
    self._lock = loop.run_directory_lock(settings.output_dir, chief, program)
    self._before = None

  def __enter__(self) -> str:
    self._lock.__enter__()
    config, settings, strategy, chief = self._args
    try:
      self._before = set(io.listdir(settings.output_dir)) if chief else None
      return prepare_output_dir(config, settings, strategy, chief)
    except BaseException as e:
      self.__exit__(type(e), e, e.__traceback__)
      raise

  def __exit__(self, kind, value, traceback):
    try:
      output_dir = self._args[1].output_dir
      if kind is not None and self._before is not None and not holds_checkpoints(output_dir):
        created = set(io.listdir(output_dir)) - self._before - {io.LOCK_NAME}
        for name in sorted(created):
          io.remove(io.join(output_dir, name))
        if created:
          logging.info("The run failed before its first checkpoint: removed what it wrote to "
                       "%s (%s)", output_dir, ", ".join(sorted(created)))
    finally:
      self._lock.__exit__(kind, value, traceback)
    return False


def record_run_info(config, settings, chief: bool, info: Dict[str, Any]) -> None:
  """Writes the record of how the run's model was trained (bert_config.json, run_settings.json
  when training, task_info.json) once the run's checks passed: the model is built, its
  checkpoint restored or init_checkpoint loaded.

  A run that does not train leaves the record beside output_dir's checkpoints as it is: it
  describes how they were trained (--allow_tokenizer_mismatch overrides a check, never the
  record)."""
  if not chief:
    return
  if not settings.do_train and holds_checkpoints(settings.output_dir) and \
      io.exists(io.join(settings.output_dir, TASK_INFO_FILE)):
    return
  loop.record_run(settings.output_dir, config, settings)
  provenance.write_task_info(settings.output_dir, info)


def training_data(paths: List[str]) -> Dict[str, str]:
  """{path: md5 of its content} of a run's training files, recorded in task_info.json as
  train_data (check_resumed_data compares them)."""
  import hashlib  # pylint: disable=g-import-not-at-top
  found = {}
  for path in paths:
    digest = hashlib.md5()
    with io.open_file(path, "rb") as f:
      for chunk in iter(lambda: f.read(1 << 20), b""):
        digest.update(chunk)
    found[path] = digest.hexdigest()
  return found


def check_resumed_data(settings, info: Dict[str, Any]) -> None:
  """Refuses to resume output_dir's checkpoints on training files whose content differs from
  the files they were trained on (task_info.json's train_data): the step count, the schedule
  and the position the resume skips to would belong to other data (K10).

  Raises:
    loop.TrainingError: naming the file and both checksums.
  """
  if not settings.do_train or not holds_checkpoints(settings.output_dir):
    return
  path = io.join(settings.output_dir, TASK_INFO_FILE)
  recorded = (io.read_json_object(path, "not used to check the training data") or {}).get(
      "train_data")
  current = info.get("train_data")
  if not recorded or not current or sorted(recorded.values()) == sorted(current.values()):
    return
  changed = [f"{name} (md5 {md5}; trained on {recorded.get(name, ', '.join(recorded.values()))})"
             for name, md5 in current.items() if md5 not in recorded.values()]
  raise loop.TrainingError(
      f"the training data changed since the checkpoints in {settings.output_dir} were trained "
      f"on it ({path}): {'; '.join(changed)}. Resuming would go on with other data at the old "
      "data position and schedule: restore the file, or choose another --output_dir")


def note_training_data(settings, info: Dict[str, Any], paths: List[str]) -> None:
  """Adds the training files' checksums to a training run's info (train_data) and refuses a
  resume on changed ones (check_resumed_data), before anything is written."""
  if settings.do_train:
    info["train_data"] = training_data([path for path in paths if path and io.exists(path)])
    check_resumed_data(settings, info)


def export_once(settings, model_name: str, version: int, export) -> str:
  """The run's export <output_dir>/export/<model_name>/<version>/: export() writes it, unless a
  rerun of a finished run finds it there already (versions are immutable, and the same step
  holds the same weights): then it is kept, and its path returned."""
  path = io.join(io.join(io.join(settings.output_dir, EXPORT_DIR), model_name), str(version))
  if io.exists(path):
    logging.info("%s exists already (the run had finished): not exported again", path)
    return path
  return export()


def resolved_path(path: str) -> str:
  """A path as the filesystem resolves it: symlinks, `.`, `..` and repeated slashes undone
  (local paths; others are only normalised)."""
  import os  # pylint: disable=g-import-not-at-top
  import posixpath  # pylint: disable=g-import-not-at-top
  if io.is_local(path):
    return os.path.realpath(os.path.expanduser(path))
  scheme, _, rest = path.partition("://")
  return f"{scheme}://{posixpath.normpath(rest)}"


def check_outputs_not_inputs(outputs: Dict[str, str], inputs: Dict[str, Optional[str]],
                             error=None) -> None:
  """Refuses an output path that resolves (symlinks, `./` spellings, ...) to an input.

  Args:
    outputs: {what: path} the command writes.
    inputs: {flag: path} it reads (None or "" entries are skipped).
    error: the exception class raised (default loop.TrainingError).

  Raises:
    error: naming the flag, the output and the path both resolve to.
  """
  written = {resolved_path(path): (what, path) for what, path in outputs.items() if path}
  for flag, path in inputs.items():
    if not path:
      continue
    hit = written.get(resolved_path(path))
    if hit is not None:
      raise (error or loop.TrainingError)(
          f"{flag}={path} is {hit[0]} ({hit[1]}; both are {resolved_path(path)}): the run "
          "would overwrite its own input. Write elsewhere")


def run_outputs(output_dir: str, names: List[str]) -> Dict[str, str]:
  """{description: path} of the files a fine-tuning run writes to output_dir (for
  check_outputs_not_inputs): its records (names) and its record of the run."""
  names = list(names) + [TASK_INFO_FILE, loop.RUN_SETTINGS_FILE]
  return {f"{name}, an output in --output_dir": io.join(output_dir, name) for name in names}


def remove_stale_results(output_dir: str, names: List[str], why: str) -> None:
  """Removes results a previous run left in output_dir that this run cannot compute (`why`),
  so that every result file there describes the current run."""
  for name in names:
    path = io.join(output_dir, name)
    if io.exists(path):
      io.remove(path)
      logging.warning("Removed %s, a previous run's: %s", path, why)


# Files of a run that hold no result: a folder with only these (a failed run's) is no run.
_RUN_RECORDS = (TASK_INFO_FILE, "bert_config.json", loop.RUN_SETTINGS_FILE)


def check_output_dir_owner(settings, head: str) -> None:
  """Refuses an output_dir that holds another command's run (a task_info.json of another
  head beside checkpoints or results), or checkpoints without any task_info.json (a
  run_pretraining run, ...): this run would write over it, or fail restoring its checkpoints
  after writing.

  Raises:
    loop.TrainingError: naming the folder, what it holds and this run's head.
  """
  directory = settings.output_dir
  if not directory or not io.isdir(directory):
    return
  trained = holds_checkpoints(directory)
  info = io.read_json_object(io.join(directory, TASK_INFO_FILE))
  if info is None:
    if trained:
      raise loop.TrainingError(
          f"--output_dir={directory} holds checkpoints but no {TASK_INFO_FILE}: not a "
          f"fine-tuning run of a {head} (a run_pretraining run?); this run would write over "
          "it. Choose another --output_dir (and pass this one as --init_checkpoint to start "
          "from it)")
    return
  recorded = provenance.fine_tuned_head(info)
  if recorded == head:
    return
  results = [name for name in io.listdir(directory) if name not in _RUN_RECORDS
             and not name.startswith(".") and not name.endswith(".tf_record")]
  if trained or results:
    holds = f"a {recorded} head" if recorded else f"task {info.get('task_name')!r}"
    raise loop.TrainingError(
        f"--output_dir={directory} holds another command's run ({holds}, "
        f"{io.join(directory, TASK_INFO_FILE)}; {', '.join(sorted(results)[:5]) or 'checkpoints'}"
        f"): this {head} run would write over it. Choose another --output_dir")


# === The model a run starts from ===
# A fine-tuned checkpoint's task_info.json (labels in id order, the task and its head, the
# tokenizer) is the truth about its head: a run that uses that head uses its labels, and a head
# is only ever loaded as the kind it was trained as.


@dataclasses.dataclass(frozen=True)
class StartingRecord:
  """What is recorded of the model a run starts from (info: the task_info; where: its file;
  source: the flag naming the model, --output_dir=... or --init_checkpoint=...)."""
  info: Optional[Dict[str, Any]] = None
  where: Optional[str] = None
  source: str = ""


def holds_checkpoints(directory: str) -> bool:
  """Whether a run directory holds training checkpoints (a model to resume or use)."""
  return bool(directory) and io.isdir(directory) and bool(loop.run_checkpoints(directory))


def _recorded(path: str, source: str) -> StartingRecord:
  info, where = provenance.recorded_task_info(path)
  return StartingRecord(info, where, source) if info is not None else StartingRecord(
      source=source)


def starting_record(settings) -> StartingRecord:
  """What is recorded of the model a run starts from: output_dir's task_info.json when
  output_dir holds checkpoints (the run resumes them), else init_checkpoint's (read_task_info);
  an empty record when nothing is."""
  if holds_checkpoints(settings.output_dir):
    return _recorded(settings.output_dir, f"--output_dir={settings.output_dir}")
  if settings.init_checkpoint:
    return _recorded(settings.init_checkpoint, f"--init_checkpoint={settings.init_checkpoint}")
  return StartingRecord()


def _shown(labels: Optional[List[str]]) -> str:
  return "regression (one output)" if labels is None else "[" + ", ".join(labels) + "]"


def _recorded_labels(info: Dict[str, Any]):
  """(known, labels): a regression head's labels are None; a head without recorded labels
  (Hugging Face's placeholder LABEL_0, ...) is unknown."""
  if info.get("regression"):
    return True, None
  if info.get("labels"):
    return True, [str(label) for label in info["labels"]]
  return False, None


def recorded_labels(settings) -> bool:
  """Whether the model a run starts from records its labels (or that it is a regression)."""
  info = starting_record(settings).info
  return bool(info) and _recorded_labels(info)[0]


@dataclasses.dataclass(frozen=True)
class StartingHead:
  """The labels a run uses (None: regression) and, when the head of the checkpoint it starts
  from must not be loaded, why (the head then starts fresh)."""
  labels: Optional[List[str]]
  fresh_head: Optional[str]


def starting_head(settings, head: str, labels: Optional[List[str]], how: Optional[str],
                  flag: str) -> StartingHead:
  """Reconciles a run's head and labels with what the checkpoint it starts from records.

  Args:
    settings: the run's settings (output_dir, init_checkpoint, do_train).
    head: the command's head kind (provenance.CLASSIFIER, TAGGER or SQUAD).
    labels: the labels the flags or the data give, in id order (None: regression, or unknown).
    how: "explicit" (a flag, or a task's fixed labels), "training" (the training file's, in
      their default order), or None (unknown: they must come from the checkpoint).
    flag: the flag naming the labels in messages (--label_list, --labels).

  Returns:
    StartingHead: the recorded labels when the recorded head is used (the training file's
    labels taken in the recorded id order), else `labels`; fresh_head set when a recorded head
    of another kind or with other labels is not loaded (training only).

  Raises:
    loop.TrainingError: evaluating or predicting would use a head of another kind or with
      other labels than it was trained with (both named), or a resumed run's labels differ.
  """
  check_output_dir_owner(settings, head)
  start = starting_record(settings)
  recorded, where, source = start.info, start.where, start.source
  recorded_head = provenance.fine_tuned_head(recorded)
  resuming = source.startswith("--output_dir")
  if recorded_head is None:
    if how is None and head != provenance.SQUAD:
      raise loop.TrainingError(
          f"no labels: without --do_train, give {flag} (every label, in the model's label id "
          "order) or an --init_checkpoint / --output_dir whose task_info.json lists them")
    return StartingHead(labels, None)
  if recorded_head != head:
    message = (f"{source} holds a {recorded_head} head ({where}), not a {head}'s")
    if not settings.do_train or resuming:
      raise loop.TrainingError(
          f"{message}: it is never loaded as one, and evaluating or predicting with an "
          f"untrained {head} head would give random results; point --init_checkpoint at a "
          f"fine-tuned {head}, or add --do_train to train a new one")
    logging.warning("%s: the %s head is not loaded, a new %s head starts from random weights",
                    message, recorded_head, head)
    if how is None:
      raise loop.TrainingError(f"no labels for the new {head} head: give {flag}")
    return StartingHead(labels, f"{message} (its weights are not loaded)")
  if head == provenance.SQUAD:
    return StartingHead(labels, None)
  known, trained_with = _recorded_labels(recorded)
  if not known or how is None or labels == trained_with:
    if how is None and not known:
      raise loop.TrainingError(f"no labels: {where} does not list the model's labels; give "
                               f"{flag} (every label, in the model's label id order)")
    return StartingHead(trained_with if known else labels, None)
  same_set = labels is not None and trained_with is not None and \
      sorted(labels) == sorted(trained_with)
  if how == "training" and same_set:
    logging.info("The labels of the training data are those the model in %s was trained with:"
                 " taken in its id order %s", where, _shown(trained_with))
    return StartingHead(trained_with, None)
  both = (f"{flag if how == 'explicit' else 'the training data'} gives the labels "
          f"{_shown(labels)}, but the model in {where} was trained with {_shown(trained_with)}"
          " (in label id order)")
  if resuming:
    raise loop.TrainingError(f"{both}: resuming {settings.output_dir} needs its labels; use "
                             "another --output_dir")
  if not settings.do_train:
    raise loop.TrainingError(f"{both}: its predictions would be named wrongly; give "
                             f"{flag}={','.join(trained_with or [])} or drop {flag}")
  if same_set:
    raise loop.TrainingError(f"{both}: the same labels in another order would train the "
                             f"head's outputs under other names; give {flag}="
                             f"{','.join(trained_with)} or drop {flag}")
  logging.warning("%s: its %s head is not loaded, a new head for %s starts from random "
                  "weights", both, head, _shown(labels))
  return StartingHead(labels, f"{both} (its weights are not loaded)")
