"""A run's --output_dir, in one place: its checkpoints, its lock and clean-up, its record, its
outputs and its export.

  - the checkpoints in it (run_checkpoints, checkpoint_state: the newest that reads completely
    is restored, restore_newest_valid_checkpoint);
  - the refusal to resume with another config or data position (check_resume_compatible,
    against the bert_config.json and run_settings.json that record_run wrote);
  - OutputDirRun: the run directory's lock (run_directory_lock), output_dir made (and each
    other worker's scratch folder for its records), and what a run that fails before its
    first checkpoint created there removed again (remove_failed_run_files);
  - the record of a fine-tuning run (bert_config.json, run_settings.json, task_info.json:
    record_run_info) and of its training files (note_training_data: a resume on changed files
    is refused);
  - the refusals made before anything is written: an output that is an input
    (check_outputs_not_inputs), an output_dir holding another command's run
    (check_output_dir_owner);
  - results a previous run left that this one cannot compute (remove_stale_results), and the
    export, once per step (export_once).

Whether a fine-tuning run resumes output_dir is worked out once, by tasks.start.find_start, and
handed in.
"""

import contextlib
import dataclasses
import hashlib
import json
import os
import posixpath
import re
import signal
import threading
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Protocol, Set

from absl import logging
import tensorflow as tf

from bert_tf import io
from bert_tf.model import checkpoints
from bert_tf.model import exporting
from bert_tf.model import provenance
from bert_tf.training.errors import RunTerminated, TrainingError

# === Checkpoints in the folder, its lock and its record ===


class CheckpointState(NamedTuple):
  """A run's checkpoint, its manager and whether it resumed."""
  checkpoint: tf.train.Checkpoint
  manager: tf.train.CheckpointManager
  resumed_from: Optional[str]


# The key of a training checkpoint's weights that are not the model's (checkpoint_state's extra).
EXTRA_WEIGHTS = "training_extras"


def checkpoint_state(model, optimizer, global_step, output_dir: str, chief: bool,
                     strategy, keep_checkpoint_max: int = 5,
                     newest_only: bool = False, extra=None) -> CheckpointState:
  """Builds the run's checkpoint and restores the latest one in output_dir, if any (with
  newest_only, only the newest: see restore_newest_valid_checkpoint).

  The model's layers are tracked by name (checkpoints.checkpointable), so export, serving and
  fine-tuning can restore these weights into any graph with the same layers. Non-chief workers
  must take part in saving (collectives) but write to a scratch directory.

  `extra` (a trackable, or None) is saved beside the model under EXTRA_WEIGHTS: weights that
  train with the model but are not part of it (intermediate distillation's projection), so a
  resumed run keeps them while everything that reads the model's weights (export, serving,
  --init_checkpoint, --teacher, the converters) sees the model alone.
  """
  parts = dict(model=checkpoints.checkpointable(model), optimizer=optimizer, step=global_step)
  if extra is not None:
    parts[EXTRA_WEIGHTS] = extra
  seeds = checkpoints.dropout_seed_states(model)
  # Checkpoints written before the dropout seeds were saved restore through `without_seeds`.
  without_seeds = tf.train.Checkpoint(**parts) if seeds is not None else None
  if seeds is not None:
    parts[checkpoints.DROPOUT_SEEDS] = seeds
  checkpoint = tf.train.Checkpoint(**parts)
  checkpoint_dir = output_dir
  if not chief:
    checkpoint_dir = os.path.join(output_dir, f".worker_{strategy.cluster_resolver.task_id}_tmp")
  manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=keep_checkpoint_max)
  latest = restore_newest_valid_checkpoint(checkpoint, output_dir, without_seeds, newest_only)
  return CheckpointState(checkpoint, manager, latest)


def _has_dropout_seeds(path: str) -> bool:
  prefix = checkpoints.DROPOUT_SEEDS + "/"
  return any(name.startswith(prefix) for name, _ in tf.train.list_variables(path))


def remove_failed_run_files(output_dir: str, before: Set[str]) -> None:
  """After a run failed: when output_dir holds no checkpoint, removes what the run wrote there
  (every name not in `before`, the lock's files excepted), so that a failed run leaves the
  folder as it was."""
  if not io.isdir(output_dir) or run_checkpoints(output_dir):
    return
  created = sorted(name for name in set(io.listdir(output_dir)) - before
                   if not name.startswith(io.LOCK_NAME))  # the lock and its heartbeat's
  for name in created:
    io.remove(io.join(output_dir, name))
  if created:
    logging.info("The run failed before its first checkpoint: removed what it wrote to %s (%s)",
                 output_dir, ", ".join(created))


def remove_if_empty(folder: str) -> None:
  """Removes a folder that holds nothing (one a failed run made and left empty)."""
  if io.isdir(folder) and not io.listdir(folder):
    io.remove(folder)


def checkpoint_step(path: str) -> int:
  match = re.search(r"-(\d+)$", path)
  return int(match.group(1)) if match else -1


def run_checkpoints(output_dir: str) -> List[str]:
  """The run's checkpoint prefixes, newest (highest number) first: those the `checkpoint` state
  file lists and every `ckpt-N.index` in output_dir (the state file may be stale or gone)."""
  found = set()
  try:
    state = tf.train.get_checkpoint_state(output_dir)
  except (tf.errors.OpError, ValueError) as e:  # a corrupt state file: the glob still finds them
    logging.warning("Cannot read %s (%s); looking for checkpoints by name",
                    io.join(output_dir, "checkpoint"), e)
    state = None
  if state is not None:
    found.update(state.all_model_checkpoint_paths)
    if state.model_checkpoint_path:
      found.add(state.model_checkpoint_path)
  found.update(path[:-len(".index")] for path in io.glob(io.join(output_dir, "ckpt-*.index")))
  return sorted(found, key=lambda p: (checkpoint_step(p), p), reverse=True)


def restore_newest_valid_checkpoint(checkpoint: tf.train.Checkpoint, output_dir: str,
                                    without_seeds: Optional[tf.train.Checkpoint] = None,
                                    newest_only: bool = False) -> Optional[str]:
  """Restores the newest checkpoint of output_dir that reads completely; returns its prefix.

  A listed checkpoint whose files are gone, or one that fails to read (truncated, corrupt), is
  named in a warning and the next older one is tried, so a run resumes from its newest valid
  state instead of silently starting again from step 0 and saving over the older checkpoints.
  `without_seeds` (the same objects without the dropout seed states) restores checkpoints
  written before those were saved, with a warning that the masks will differ.

  A run that does not train (newest_only: evaluation, prediction) must not fall back: its
  results would describe an older model than the newest checkpoint, without saying so.

  Returns:
    The restored prefix, or None when output_dir holds no checkpoint at all.

  Raises:
    TrainingError: output_dir has checkpoints but none of them can be restored; or, with
      newest_only, the newest cannot (naming it and the older one it would have used).
  """
  candidates = run_checkpoints(output_dir)
  problems = []
  for path in candidates:
    if not io.exists(path + ".index"):
      problems.append(f"{path}: its files are missing")
      logging.warning("Checkpoint %s is listed but its files are missing; trying an older one",
                      path)
      continue
    try:
      if without_seeds is not None and not _has_dropout_seeds(path):
        without_seeds.restore(path).assert_existing_objects_matched()
        logging.warning("%s holds no dropout RNG state (written by an older bert_tf): the "
                        "resumed run draws other dropout masks than an uninterrupted run "
                        "would have", path)
      else:
        checkpoint.restore(path).assert_existing_objects_matched()
    except (tf.errors.OpError, ValueError, IndexError, AssertionError) as e:
      reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      problems.append(f"{path}: {reason}")
      logging.warning("Checkpoint %s cannot be restored (%s); trying an older one", path, reason)
      continue
    if problems and newest_only:
      raise TrainingError(
          f"the newest checkpoint in {output_dir} cannot be restored ({'; '.join(problems)}); "
          f"this run does not train, so it would evaluate or predict with an older one ({path})"
          " without saying so. Restore or remove the damaged checkpoint's files, or train again "
          "to write it anew")
    if problems:
      logging.warning("Resuming from %s, the newest valid checkpoint (skipped: %s)", path,
                      "; ".join(problems))
    logging.info("Resuming from %s", path)
    return path
  if candidates:
    raise TrainingError(
        f"{output_dir} holds checkpoints but none can be restored ({'; '.join(problems)}); "
        "refusing to start again from step 0 over them: move them away or choose another "
        "--output_dir")
  return None


class RunSettings(Protocol):
  """What the run folder reads of a command's settings (a frozen dataclass: PretrainingSettings,
  a task's FineTuningSettings): whether it trains, and its flags by field name."""
  do_train: bool


RUN_SETTINGS_FILE = "run_settings.json"
# run_settings.json's list of the flags a resume changed: one {flag: [before, after]} a resume.
RESUME_CHANGES = "changed_on_resume"
# The flags whose change moves a resumed run's data position (resume skips global_step batches
# of the new size and length): a resume that changes one is refused.
POSITION_FLAGS = ("train_batch_size", "max_seq_length", "max_predictions_per_seq")
# Flags recorded too, whose change on resume is allowed but warned about: the resumed run then
# differs from an uninterrupted one (another data order, schedule or data).
TRAJECTORY_FLAGS = ("seed", "learning_rate", "num_train_steps", "num_train_epochs",
                    "group_by_length",
                    "num_warmup_steps", "warmup_proportion", "optimizer", "adam_bias_correction",
                    "gradient_accumulation_steps", "input_file", "train_file", "data_dir",
                    "init_checkpoint", "packing", "teacher", "distill_alpha",
                    "distill_temperature", "distill_hidden_weight", "distill_layer_map",
                    "distill_attention_weight", "distill_value_weight", "distill_relation_heads",
                    "distill_cosine_weight")


def run_directory_lock(output_dir: str, chief: bool, program: str):
  """The chief's lock on a run directory (io.directory_lock); other workers, which write to
  scratch directories of their own, take none."""
  return io.directory_lock(output_dir, program) if chief else contextlib.nullcontext()


def check_resume_compatible(output_dir: str, config, settings: RunSettings) -> None:
  """Refuses to resume the checkpoints in output_dir with another config or data position.

  Called before anything is written to output_dir, so a refused resume leaves the run as it
  was. Compares with the bert_config.json and run_settings.json that record_run wrote there.

  Raises:
    TrainingError: naming the config file or the flag that differs.
  """
  if not run_checkpoints(output_dir):
    return
  config_path = io.join(output_dir, "bert_config.json")
  if io.exists(config_path):
    recorded = json.loads(io.read_text(config_path))
    current = config.to_dict()
    changed = [f"{key} {recorded.get(key)!r} -> {current.get(key)!r}"
               for key in sorted(set(recorded) | set(current))
               if recorded.get(key) != current.get(key)]
    if changed:
      raise TrainingError(
          f"--bert_config_file differs from {config_path}, the config of the checkpoints in "
          f"--output_dir ({'; '.join(changed)}); resume with that config or choose another "
          "--output_dir")
  settings_path = io.join(output_dir, RUN_SETTINGS_FILE)
  # Evaluating or predicting with the checkpoints at another length or batch size is fine.
  if settings.do_train and io.exists(settings_path):
    recorded = json.loads(io.read_text(settings_path))
    current = recorded_flags(settings)
    for key in POSITION_FLAGS:
      if key in recorded and key in current and recorded[key] != current[key]:
        raise TrainingError(
            f"--{key}={current[key]} but the checkpoints in {output_dir} were trained "
            f"with --{key}={recorded[key]}: resuming would not continue where the run stopped "
            f"in the data; resume with --{key}={recorded[key]} or choose another --output_dir")
    changed = [f"--{key} {recorded[key]!r} -> {current[key]!r}"
               for key in TRAJECTORY_FLAGS
               if key in recorded and key in current and recorded[key] != current[key]]
    if changed:
      logging.warning("Resuming the checkpoints in %s with changed flags (%s): the run goes "
                      "on, but it will not equal an uninterrupted run with the recorded flags "
                      "(%s)", output_dir, "; ".join(changed), settings_path)


def record_run(output_dir: str, config, settings: RunSettings,
               extra: Optional[Mapping[str, Any]] = None) -> None:
  """Writes bert_config.json and, for a training run, run_settings.json (the data-position
  flags, refused when changed on resume, and TRAJECTORY_FLAGS, warned about; `extra` entries a
  command checks itself) to output_dir."""
  config.to_json_file(io.join(output_dir, "bert_config.json"))
  if not settings.do_train:
    return
  path = io.join(output_dir, RUN_SETTINGS_FILE)
  record = dict(recorded_flags(settings), **(extra or {}))
  if io.exists(path) and holds_checkpoints(output_dir):
    # A resume with changed flags (warned about): the record keeps what they were before, so
    # it still says how the checkpoints it continues were trained.
    before = json.loads(io.read_text(path))
    history = list(before.get(RESUME_CHANGES, []))
    changed = {key: [before[key], value] for key, value in record.items()
               if key in before and before[key] != value}
    if changed:
      history.append(changed)
    if history:
      record[RESUME_CHANGES] = history
  io.write_text(path, json.dumps(record, indent=2, sort_keys=True) + "\n")


def recorded_flags(settings: RunSettings) -> Dict[str, Any]:
  """The POSITION_FLAGS and TRAJECTORY_FLAGS among the settings' fields, by name (a command's
  settings declare those of its flags, e.g. pretraining's input_file, a fine-tuning run's
  train_file)."""
  fields = dataclasses.asdict(settings)
  return {key: fields[key] for key in POSITION_FLAGS + TRAJECTORY_FLAGS if key in fields}


# === A fine-tuning run's folder ===


TASK_INFO_FILE = provenance.TASK_INFO_FILE
# A run's exports: <output_dir>/export/<model name>/<version>/ (TF Serving's layout).
# Files of a run that hold no result: a folder with only these (a failed run's) is no run.
_RUN_RECORDS = (TASK_INFO_FILE, "bert_config.json", RUN_SETTINGS_FILE, provenance.VOCAB_FILE)


def holds_checkpoints(directory: str) -> bool:
  """Whether a run directory holds training checkpoints (a model to resume or use)."""
  return bool(directory) and io.isdir(directory) and bool(run_checkpoints(directory))


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
  check_resume_compatible(settings.output_dir, config, settings)
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
  run directory's lock (run_directory_lock), prepares it (prepare_output_dir) and, when
  the run fails (an exception, an interrupt) while output_dir holds no checkpoint, removes what
  the run created there, so that a failed run leaves nothing behind for the next one to trip
  on. What was there before is left as it was."""

  def __init__(self, config, settings, strategy, chief: bool, program: str):
    self._args = (config, settings, strategy, chief)
    self._new_folder = chief and not io.exists(settings.output_dir)
    self._lock = run_directory_lock(settings.output_dir, chief, program)
    self._before = None
    self._sigterm = None

  def __enter__(self) -> str:
    self._lock.__enter__()
    self._sigterm = _sigterm_raises()
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
        remove_failed_run_files(output_dir, self._before)
    finally:
      self._lock.__exit__(kind, value, traceback)
      if self._sigterm is not None:
        signal.signal(signal.SIGTERM, self._sigterm)
    if kind is not None and self._new_folder:
      remove_if_empty(output_dir)
    return False


def _sigterm_raises():
  """Makes a SIGTERM raise RunTerminated (in the main thread, where the default would kill the
  process with no cleanup); returns the handler to put back, or None when another one (a
  cluster's, a test's) was in place and is left alone. The training loop installs its own for
  its steps (training.stopping) and puts this one back after them."""
  if threading.current_thread() is not threading.main_thread() or \
      signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
    return None

  def terminated(signum, frame):
    del signum, frame
    raise RunTerminated("stopped by SIGTERM")

  return signal.signal(signal.SIGTERM, terminated)


# === The record of the run ===


def record_run_info(config, settings, start, chief: bool, info: Dict[str, Any],
                    extra: Optional[Mapping[str, Any]] = None) -> None:
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
  record_run(settings.output_dir, config, settings, extra)
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
    TrainingError: naming the file and both checksums.
  """
  if not settings.do_train or not start.resuming:
    return
  recorded = (start.info or {}).get("train_data")
  current = info.get("train_data")
  if not recorded or not current or sorted(recorded.values()) == sorted(current.values()):
    return
  changed = [f"{name} (md5 {md5}; trained on {recorded[name]})" if name in recorded else
             f"{name} (md5 {md5}; not part of the data the checkpoints were trained on)"
             for name, md5 in current.items() if md5 not in recorded.values()]
  changed += [f"{name} (trained on md5 {md5}; not part of this run)"
              for name, md5 in recorded.items() if md5 not in current.values()]
  raise TrainingError(
      f"the training data changed since the checkpoints in {settings.output_dir} were trained "
      f"on it ({start.where}): {'; '.join(changed)}. Resuming would go on with other data at "
      "the old data position and schedule: give the run the inputs it was trained with (the "
      "same files and flags), or choose another --output_dir")


def note_training_data(settings, start, info: Dict[str, Any], paths: List[str],
                       made: Optional[Mapping[str, str]] = None) -> None:
  """Adds the training files' checksums to a training run's info (train_data), with `made`
  ({what: md5} of training inputs the run makes itself, e.g. --distill_augment's copies), and
  refuses a resume on changed ones (check_resumed_data), before anything is written."""
  if settings.do_train:
    info["train_data"] = dict(
        training_data([path for path in paths if path and io.exists(path)]), **(made or {}))
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
    error: the exception class raised (default TrainingError).

  Raises:
    error: naming the flag, the output and the path both resolve to.
  """
  written = {resolved_path(path): (what, path) for what, path in outputs.items() if path}
  for flag, path in inputs.items():
    if not path:
      continue
    hit = written.get(resolved_path(path))
    if hit is not None:
      raise (error or TrainingError)(
          f"{flag}={path} is {hit[0]} ({hit[1]}; both are {resolved_path(path)}): the run "
          "would overwrite its own input. Write elsewhere")


def run_outputs(output_dir: str, names: List[str]) -> Dict[str, str]:
  """{description: path} of the files a fine-tuning run writes to output_dir (for
  check_outputs_not_inputs): its records (names) and its record of the run."""
  names = list(names) + [TASK_INFO_FILE, RUN_SETTINGS_FILE]
  return {f"{name}, an output in --output_dir": io.join(output_dir, name) for name in names}


def check_output_dir_owner(settings, start, head: str) -> None:
  """Refuses an output_dir that holds another command's run (a task_info.json of another
  head beside checkpoints or results), or checkpoints (start.resuming) without any
  task_info.json (a run_pretraining run, ...): this run would write over it, or fail restoring
  its checkpoints after writing.

  Raises:
    TrainingError: naming the folder, what it holds and this run's head.
  """
  directory = settings.output_dir
  if not directory or not io.isdir(directory):
    return
  info = io.read_json_object(io.join(directory, TASK_INFO_FILE))
  if info is None:
    if start.resuming:
      raise TrainingError(
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
    raise TrainingError(
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
