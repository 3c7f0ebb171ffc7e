"""A fine-tuning run's --output_dir: its lock and clean-up, its record, its outputs, its export.

  - OutputDirRun: the run directory's lock, output_dir made (and each other worker's scratch
    folder for its records), and what a run that fails before its first checkpoint created
    there removed again;
  - the record of the run (bert_config.json, run_settings.json, task_info.json:
    record_run_info) and of its training files (note_training_data: a resume on changed files
    is refused);
  - the refusals made before anything is written: an output that is an input
    (check_outputs_not_inputs), an output_dir holding another command's run
    (check_output_dir_owner);
  - results a previous run left that this one cannot compute (remove_stale_results), and the
    export, once per step (export_once).

Whether the run resumes output_dir is worked out once, by tasks.start.find_start, and handed in.
"""

import hashlib
import os
import posixpath
from typing import Any, Callable, Dict, List, Optional

from absl import logging

from bert_tf import io
from bert_tf.model import exporting
from bert_tf.model import provenance
from bert_tf.training import loop

TASK_INFO_FILE = provenance.TASK_INFO_FILE
# A run's exports: <output_dir>/export/<model name>/<version>/ (TF Serving's layout).
# Files of a run that hold no result: a folder with only these (a failed run's) is no run.
_RUN_RECORDS = (TASK_INFO_FILE, "bert_config.json", loop.RUN_SETTINGS_FILE, provenance.VOCAB_FILE)


def holds_checkpoints(directory: str) -> bool:
  """Whether a run directory holds training checkpoints (a model to resume or use)."""
  return bool(directory) and io.isdir(directory) and bool(loop.run_checkpoints(directory))


# === The run directory ===


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
    self._new_folder = chief and not io.exists(settings.output_dir)
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
    output_dir = self._args[1].output_dir
    try:
      # Asked when the run fails: whether it (or an earlier run) has saved a checkpoint by now.
      if kind is not None and self._before is not None:
        loop.remove_failed_run_files(output_dir, self._before)
    finally:
      self._lock.__exit__(kind, value, traceback)
    if kind is not None and self._new_folder:
      loop.remove_if_empty(output_dir)
    return False


# === The record of the run ===


def record_run_info(config, settings, start, chief: bool, info: Dict[str, Any]) -> None:
  """Writes the record of how the run's model was trained (bert_config.json, run_settings.json
  when training, task_info.json, vocab.txt) once the run's checks passed: the model is built, its
  checkpoint restored or init_checkpoint loaded.

  A run that does not train leaves the record beside the checkpoints it resumes (start, a
  tasks.start.Start) as it is: it describes how they were trained (--allow_tokenizer_mismatch
  overrides a check, never the record)."""
  if not chief:
    return
  if not settings.do_train and start.resuming and \
      io.exists(io.join(settings.output_dir, TASK_INFO_FILE)):
    return
  loop.record_run(settings.output_dir, config, settings)
  provenance.write_task_info(settings.output_dir, info)
  # The vocab beside the checkpoints, as run_pretraining's folders hold it: what export and
  # convert_checkpoint of this run read by default.
  vocab = io.join(settings.output_dir, provenance.VOCAB_FILE)
  if settings.vocab_file and settings.vocab_file != vocab:
    provenance.record_vocab(settings.output_dir, settings.vocab_file)


def training_data(paths: List[str]) -> Dict[str, str]:
  """{path: md5 of its content} of a run's training files, recorded in task_info.json as
  train_data (check_resumed_data compares them)."""
  found = {}
  for path in paths:
    digest = hashlib.md5()
    with io.open_file(path, "rb") as f:
      for chunk in iter(lambda: f.read(1 << 20), b""):
        digest.update(chunk)
    found[path] = digest.hexdigest()
  return found


def check_resumed_data(settings, start, info: Dict[str, Any]) -> None:
  """Refuses to resume output_dir's checkpoints (start.resuming) on training files whose
  content differs from the files they were trained on (its task_info.json's train_data): the
  step count, the schedule and the position the resume skips to would belong to other data
  (K10).

  Raises:
    loop.TrainingError: naming the file and both checksums.
  """
  if not settings.do_train or not start.resuming:
    return
  recorded = (start.info or {}).get("train_data")
  current = info.get("train_data")
  if not recorded or not current or sorted(recorded.values()) == sorted(current.values()):
    return
  changed = [f"{name} (md5 {md5}; trained on {recorded.get(name, ', '.join(recorded.values()))})"
             for name, md5 in current.items() if md5 not in recorded.values()]
  raise loop.TrainingError(
      f"the training data changed since the checkpoints in {settings.output_dir} were trained "
      f"on it ({start.where}): {'; '.join(changed)}. Resuming would go on with other data at "
      "the old data position and schedule: restore the file, or choose another --output_dir")


def note_training_data(settings, start, info: Dict[str, Any], paths: List[str]) -> None:
  """Adds the training files' checksums to a training run's info (train_data) and refuses a
  resume on changed ones (check_resumed_data), before anything is written."""
  if settings.do_train:
    info["train_data"] = training_data([path for path in paths if path and io.exists(path)])
    check_resumed_data(settings, start, info)


# === Refusals before anything is written ===


def resolved_path(path: str) -> str:
  """A path as the filesystem resolves it: symlinks, `.`, `..` and repeated slashes undone
  (local paths; others are only normalised)."""
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


def check_output_dir_owner(settings, start, head: str) -> None:
  """Refuses an output_dir that holds another command's run (a task_info.json of another
  head beside checkpoints or results), or checkpoints (start.resuming) without any
  task_info.json (a run_pretraining run, ...): this run would write over it, or fail restoring
  its checkpoints after writing.

  Raises:
    loop.TrainingError: naming the folder, what it holds and this run's head.
  """
  directory = settings.output_dir
  if not directory or not io.isdir(directory):
    return
  info = io.read_json_object(io.join(directory, TASK_INFO_FILE))
  if info is None:
    if start.resuming:
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
  if start.resuming or results:
    holds = f"a {recorded} head" if recorded else f"task {info.get('task_name')!r}"
    raise loop.TrainingError(
        f"--output_dir={directory} holds another command's run ({holds}, "
        f"{io.join(directory, TASK_INFO_FILE)}; {', '.join(sorted(results)[:5]) or 'checkpoints'}"
        f"): this {head} run would write over it. Choose another --output_dir")


# === Results and the export ===


def remove_stale_results(output_dir: str, names: List[str], why: str) -> None:
  """Removes results a previous run left in output_dir that this run cannot compute (`why`),
  so that every result file there describes the current run."""
  for name in names:
    path = io.join(output_dir, name)
    if io.exists(path):
      io.remove(path)
      logging.warning("Removed %s, a previous run's: %s", path, why)


def export_once(settings, model_name: str, version: int, export: Callable[[], str]) -> str:
  """The run's export <output_dir>/export/<model_name>/<version>/: export() writes it, unless a
  rerun of a finished run finds it there already (versions are immutable, and the same step
  holds the same weights): then it is kept, and its path returned."""
  path = exporting.export_path(settings.output_dir, model_name, version)
  if io.exists(path):
    logging.info("%s exists already (the run had finished): not exported again", path)
    return path
  return export()
