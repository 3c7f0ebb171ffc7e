"""The fine-tuning run driver: what every fine-tuning command does around its task.

`run(task, config, settings, strategy, exporter)` runs one fine-tuning run, in this order:

  1. settings.check(config, replicas): every impossible flag named at once;
  2. where the run starts, worked out once (start.find_start: the output_dir it resumes or the
     --init_checkpoint it starts from, with what is recorded of it), handed to every step below;
  3. the tokenizer (start.run_tokenizer): --do_lower_case, when not given, from what the model
     the run starts from records (start.resolved_casing); the vocab fits the config and agrees
     with what the --init_checkpoint and a resumed --output_dir were trained with;
  4. an --output_dir holding another command's run is refused (run_folder.check_output_dir_owner);
  5. task.read: the task reads every file it needs and reconciles its labels and head with the
     model it starts from (start.starting_head), before anything is written, so a bad row
     stops the run with no output; it also names the files it will write and read;
  6. the refusals that need nothing written: an output that is an input, a resume on changed
     training data, evaluating or predicting with a head that was never trained;
  7. the run directory (run_folder.OutputDirRun: lock, output_dir, clean-up of a run that fails
     before its first checkpoint) under the --mixed_precision dtype policy;
  8. task.train_records: the training records, and the step count from them;
  9. the model, optimizer and checkpoint, resuming output_dir's newest (loop.prepare_run);
     --init_checkpoint when not resuming (init_fine_tuning); the record of the run
     (bert_config.json, run_settings.json, task_info.json: run_folder.record_run_info);
  10. training (fine_tune), task.evaluate (evaluation and prediction files), and the export the
     command hands in (an Exporter), once per step (run_folder.export_once).

A task is a FineTuningTask: its names and the few plain functions that are its own (reading its
files, writing its records, building its model, its loss, its record spec, its evaluation). A new
task writes those in its own <task>_run.py and a thin command in bert_tf/ that calls `run`.

--seeds and the paper's hyperparameter sweep, which every fine-tuning command shares, are
tasks.repeats'; the shared settings and their checks are tasks.common's.
"""

import contextlib
import dataclasses
import hashlib
import json
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Set, Tuple

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf import length_buckets
from bert_tf import row_packing
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model import exporting
from bert_tf.tasks import common
from bert_tf.tasks import start as start_lib
from bert_tf.tasks import teaching
from bert_tf.training import bucketing
from bert_tf.training import distribution
from bert_tf.training import evaluation
from bert_tf.training import input_pipeline
from bert_tf.training import loop
from bert_tf.training import packed_rows
from bert_tf.training import run_folder
from bert_tf.training import run_result
from bert_tf.training.distillation import features
from bert_tf.training.distillation import predictions as distill_predictions
from bert_tf.training.errors import TrainingError

TRAIN_RECORDS = "train.tf_record"


# === What a task gives the driver ===


@dataclasses.dataclass(frozen=True)
class TaskInputs:
  """What task.read found, before anything is written.

  Attributes:
    data: the task's own (its examples, labels, ...), handed back to its other functions.
    info: the run's task_info.json (labels in id order, head kind, casing, vocab md5, ...).
    fresh_head: why the head of the checkpoint the run starts from is not loaded (None: it is,
      when there is one), from start.starting_head.
    train_files: the training files (their md5s are recorded, a resume on changed ones refused).
    made_data: {what: md5} of training inputs the run makes itself (made_data_digest), recorded and
      checked on a resume as the training files are.
    outputs: the names of the files the run writes in output_dir (besides the run's record).
    inputs: {flag: path} of the files the run reads (--vocab_file is added): no output may be
      one of them.
    result: entries the run's result starts with (e.g. the label list).
  """
  data: Any
  info: Dict[str, Any]
  fresh_head: Optional[str] = None
  train_files: Sequence[Optional[str]] = ()
  made_data: Mapping[str, str] = dataclasses.field(default_factory=dict)
  outputs: Sequence[str] = ()
  inputs: Mapping[str, Optional[str]] = dataclasses.field(default_factory=dict)
  result: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def made_data_digest(what: str, texts: Sequence[Sequence[Optional[str]]]) -> Dict[str, str]:
  """TaskInputs.made_data of inputs the run makes (e.g. "--distill_augment"'s copies): {what:
  md5 of their texts} ({} when there are none)."""
  if not texts:
    return {}
  digest = hashlib.md5()
  for fields in texts:
    digest.update(json.dumps(list(fields), ensure_ascii=False).encode("utf-8") + b"\n")
  return {what: digest.hexdigest()}


@dataclasses.dataclass(frozen=True)
class TrainingRecords:
  """What task.train_records wrote: `count` training `unit`s ("examples" or "windows") that the
  step count is taken from (the original's int(count / train_batch_size * num_train_epochs)),
  the lines logged under "Running training", and entries for the run's result; `records`, the
  records in the file when they are not `count` (SQuAD counts examples, each of a few windows).
  """
  count: int
  unit: str
  log: Tuple[str, ...] = ()
  result: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  records: Optional[int] = None

  @property
  def num_records(self) -> int:
    return self.count if self.records is None else self.records


@dataclasses.dataclass
class RunState:
  """One run as the task's functions see it after the run directory is taken."""
  config: BertConfig
  settings: common.FineTuningSettings
  strategy: tf.distribute.Strategy
  chief: bool
  tokenizer: Any
  record_dir: str
  inputs: TaskInputs
  start: start_lib.Start = dataclasses.field(default_factory=start_lib.Start)
  trainer: Optional[loop.Trainer] = None
  teacher: Optional[teaching.Teacher] = None
  # The teacher's predictions (its dev evaluation, the --cache_teacher pass): one Trainer, so
  # that they share its traced predict step.
  teacher_trainer: Optional[loop.Trainer] = None
  # --cache_teacher: output -> the shape of one record's cached values.
  cached: Dict[str, Tuple[int, ...]] = dataclasses.field(default_factory=dict)
  # The intermediate distillation losses (None: off), and the teacher's model exposing what
  # they read (loaded with the teacher).
  intermediate: Optional[features.Plan] = None
  teacher_features: Optional[keras.Model] = None


@dataclasses.dataclass(frozen=True)
class FineTuningTask:
  """A fine-tuning task: its names and the functions that are its own.

  Attributes:
    program: the command ("run_classifier"): the run directory's lock names it.
    head: its head kind (a row of provenance.HEAD_KINDS).
    head_layer: the head's dense layer in the model (whether init_checkpoint loaded it).
    head_name: the head's original variable names, for messages.
    untrained: the end of the refusal to evaluate or predict with a head never trained.
    read: (settings, start, vocab md5) -> TaskInputs; reads every input file, its labels
      reconciled with where the run starts (a start.Start); records are written later, by
      train_records and evaluate, once the run directory is taken.
    train_records: (state, path) -> TrainingRecords; writes the training records to path.
    build_model: (config, inputs, packed=bool) -> the Keras model (built under the strategy's
      scope); packed: it takes packed rows (--packing).
    loss: inputs -> the loop.Task (loss and metric sums) the model trains with.
    record_spec: (inputs, max_seq_length, is_training) -> the task's record spec, from its
      data module (`<task>/data.py`'s `record_spec`): the driver reads
      every batch of the task's records with it (dataset, predict).
    evaluate: (state, result so far) -> result entries; evaluates and predicts, writing the
      task's result and prediction files.
    export_info: (settings, info, result) -> the task_info the export records (default: info).
    packs_exactly: whether the task's loss on packed rows is its unpacked loss (--packing=auto
      packs only such tasks; a task whose loss is not, e.g. one normalized per row, says False).
    distill: (inputs, teacher_outputs, temperature, alpha) -> the loop.Task of the task's loss
      mixed with a teacher's soft targets (teacher_outputs: batch -> the teacher's outputs);
      None: the task cannot be taught (--teacher is refused).
    results_files: the files of results the task writes in output_dir (`key = value` text or
      JSON), to which a distilled run adds its teacher's results (tasks.teaching).
    cached_outputs: the teacher's outputs --cache_teacher writes into the training records
      (e.g. ("logits",)); empty: the task has no cache.
    cache_layout: how they sit in the records (teaching.CACHE_LAYOUTS): one vector per
      example, or per position (the record's real positions only, or every position).
  """
  program: str
  head: str
  head_layer: str
  head_name: str
  untrained: str
  read: Callable[..., TaskInputs]
  train_records: Callable[[RunState, str], TrainingRecords]
  build_model: Callable[[BertConfig, TaskInputs], keras.Model]
  loss: Callable[[TaskInputs], loop.Task]
  record_spec: Callable[[TaskInputs, int, bool], input_pipeline.RecordSpec]
  evaluate: Callable[[RunState, Dict[str, Any]], Dict[str, Any]]
  export_info: Optional[Callable[[Any, Dict[str, Any], Dict[str, Any]], Dict[str, Any]]] = None
  packs_exactly: bool = True
  distill: Optional[Callable[..., loop.Task]] = None
  results_files: Tuple[str, ...] = ()
  cached_outputs: Tuple[str, ...] = ()
  cache_layout: str = teaching.PER_EXAMPLE


# The export a command hands in (model.exporting's convention, shared with run_pretraining):
# after training, `export(model, config, settings, info, version=step)` writes
# <output_dir>/export/<model_name>/<step>/ and returns its path.
Exporter = exporting.Exporter


# === The run ===


def run(task: FineTuningTask, config: BertConfig, settings,
        strategy: Optional[tf.distribute.Strategy] = None,
        exporter: Optional[Exporter] = None) -> Dict[str, Any]:
  """Fine-tunes, evaluates and/or predicts (the module docstring's steps); resumes from
  settings.output_dir when it holds a checkpoint; exports with `exporter` after training
  (settings.export; none without an exporter).

  Returns:
    The result: global_step, model, num_train_steps (when training), export_dir (when
    exported), and the task's entries (its eval results, predictions, labels).

  Raises:
    TrainingError: bad flags or data (naming the flag, the file and line), a tokenizer
      that contradicts the checkpoint, an untrained head, or a non-finite loss.
  """
  strategy = strategy or distribution.select_strategy()
  settings.check(config, strategy.num_replicas_in_sync)
  settings = resolved_packing(task, settings)
  chief = distribution.is_chief(strategy)
  start = start_lib.find_start(settings)  # "does the run resume?", answered once
  settings = start_lib.resolved_casing(settings, start)  # --do_lower_case by default recorded
  with bad_input_as_training_error():
    tokenizer, vocab_md5 = start_lib.run_tokenizer(config, settings, start)
    run_folder.check_output_dir_owner(settings, start, task.head)
    inputs = task.read(settings, start, vocab_md5)
  run_folder.check_outputs_not_inputs(
      run_folder.run_outputs(settings.output_dir, list(inputs.outputs)),
      dict(inputs.inputs, **{"--vocab_file": settings.vocab_file}))
  run_folder.note_training_data(settings, start, inputs.info, list(inputs.train_files),
                                made=inputs.made_data)
  teaching.check_teacher(settings, inputs.info, task.distill is not None, task.program)
  if settings.cache_teacher and not task.cached_outputs:
    raise TrainingError(f"--cache_teacher: {task.program} keeps no cache of its teacher's "
                        "outputs; drop it (the teacher then runs in the training step)")
  plan = teaching.intermediate_plan(settings, config)
  teaching.check_resumed_projection(settings, start.resuming, plan)
  if settings.cache_teacher and settings.teacher and chief:  # before the records are rewritten
    teaching.check_cache_stamp(settings.output_dir, teaching.cache_stamp(settings, inputs.info))
  if not settings.do_train and start.checkpoint is None:
    # Refused before output_dir is touched (init_fine_tuning refuses the other untrained cases).
    raise TrainingError(
        f"the {task.head_name} was never trained: no --init_checkpoint and no checkpoint in "
        f"--output_dir={settings.output_dir}; {task.untrained}")
  with run_folder.OutputDirRun(config, settings, strategy, chief, task.program) as record_dir:
    with distribution.dtype_policy(settings.mixed_precision):
      state = RunState(config, settings, strategy, chief, tokenizer, record_dir, inputs, start,
                       intermediate=plan)
      return _run(task, state, exporter)



def resolved_packing(task: FineTuningTask, settings):
  """settings with --packing=auto made concrete where the flags decide (PackingMode.resolved):
  none for the tasks whose packed loss is not the unpacked one (task.packs_exactly), under XLA
  and with --group_by_length; logged. Where they would pack (exact) it stays auto until the
  training records are written: packing_for_records decides then."""
  asked = settings.packing_mode
  mode = asked.resolved(exact_task=task.packs_exactly, xla=settings.use_tpu or settings.jit_compile)
  if settings.group_by_length and asked.auto:
    mode = packed_rows.PackingMode(row_packing.NONE)  # length-grouped batches, asked for, instead
  if not asked.auto or not mode.exact:
    if asked.auto:
      logging.info("--packing=auto: %s", mode.value)
    return dataclasses.replace(settings, packing=mode.value)
  return settings


# --packing=auto packs a task's batches only when packed rows compute at most this share of the
# positions of the same batches unpacked and cut to their length bucket: near 1 packing only adds
# its attention mask and gathers (pairs of ~50 tokens in rows of 64 are one a row either way).
AUTO_PACKING_MAX_SHARE = 0.9


def packing_for_records(settings, records: Optional[str], num_replicas: int):
  """settings with an --packing=auto that resolved_packing left open made concrete from the
  training records' lengths (packed_rows.packed_position_share of a replica's batches, each
  sequence of a record of several at its own length, as packed rows take them): exact when it
  computes at most AUTO_PACKING_MAX_SHARE of the positions, else none; without training
  records (eval or predict only), exact. Logged."""
  if not settings.packing_mode.auto:
    return settings
  mode, why = row_packing.EXACT, "no training records to measure"
  if records is not None:
    shares = distribution.BatchShares(settings.train_batch_size, num_replicas,
                                      settings.gradient_accumulation_steps)
    sequences = shares.micro_batch_per_replica * bucketing.sequences_per_record(
        records, settings.max_seq_length)
    share = packed_rows.packed_position_share(
        bucketing.length_counts(records, settings.max_seq_length, per_sequence=True),
        sequences, settings.max_seq_length, settings.buckets(settings.max_seq_length))
    if share > AUTO_PACKING_MAX_SHARE:
      mode = row_packing.NONE
    why = (f"packed rows would compute {share:.0%} of the positions of the unpacked batches "
           f"cut to their length buckets (packing pays below {AUTO_PACKING_MAX_SHARE:.0%})")
  logging.info("--packing=auto: %s (%s)", mode, why)
  return dataclasses.replace(settings, packing=mode)


def num_train_steps(count: int, train_batch_size: int, num_train_epochs: float) -> int:
  """The original's int(len(train_examples) / train_batch_size * num_train_epochs)."""
  return int(count / train_batch_size * num_train_epochs)


def _run(task: FineTuningTask, state: RunState, exporter: Optional[Exporter]) -> Dict[str, Any]:
  settings = state.settings
  result = run_result.RunResult(state.inputs.result)
  train_path = io.join(state.record_dir, TRAIN_RECORDS)
  steps = 0
  if settings.do_train:
    records = task.train_records(state, train_path)
    steps = num_train_steps(records.count, settings.train_batch_size, settings.num_train_epochs)
    if steps <= 0:
      raise TrainingError(
          f"{records.count} training {records.unit} / --train_batch_size="
          f"{settings.train_batch_size} x --num_train_epochs={settings.num_train_epochs} is "
          "less than one step; lower the batch size or train more epochs")
    warmup = int(steps * settings.warmup_proportion)
    result.update(records.result, num_train_steps=steps)
    logging.info("***** Running training *****")
    for line in records.log:
      logging.info("  %s", line)
    logging.info("  Batch size = %d", settings.train_batch_size)
    logging.info("  Num steps = %d (warmup %d)", steps, warmup)
  given = settings  # recorded (--packing=auto as given): a resume makes it concrete again
  settings = state.settings = packing_for_records(
      settings, train_path if settings.do_train else None, state.strategy.num_replicas_in_sync)
  packed = settings.packing_mode.packed
  run_ = loop.prepare_run(state.strategy,
                          lambda: task.build_model(state.config, state.inputs, packed=packed),
                          _loop_task(task, state), settings, max(steps, 1),
                          int(steps * settings.warmup_proportion), state.chief,
                          step_model=(None if state.intermediate is None else
                                      features.student_step_model(
                                          state.intermediate, state.config.initializer_range)))
  state.trainer = run_.trainer
  init_fine_tuning(run_, settings, state.start, task.head_layer, task.head_name, task.untrained,
                   fresh_head=state.inputs.fresh_head)
  # The teacher is built after the student, so that the student starts from the weights a
  # run without --teacher starts from (building a model draws on the random initializers).
  result.update(_teach(task, state, packed))
  if settings.teacher and settings.cache_teacher and settings.do_train:
    _cache_teacher(task, state, train_path, records.num_records)
  run_folder.record_run_info(state.config, given, state.start, state.chief, state.inputs.info,
                             teaching.projection_record(state.intermediate))
  if settings.do_train:
    grouped = settings.grouped(settings.max_seq_length)
    shares = distribution.BatchShares(settings.train_batch_size,
                                      state.strategy.num_replicas_in_sync,
                                      settings.gradient_accumulation_steps)
    packing = training_packing(settings, train_path, shares.micro_batch_per_replica)
    boundaries = None
    if packing is None:
      boundaries = settings.record_buckets(train_path, settings.max_seq_length,
                                           shares.per_replica, grouped=grouped)
    elif packing.exact:
      boundaries = settings.buckets(settings.max_seq_length)  # the row widths to choose from
    result.update(fine_tune(
        run_, settings, lambda batch, ctx: dataset(
            task, state, train_path, batch, is_training=True,
            input_context=ctx, seed=settings.seed,
            shuffle_buffer_size=settings.shuffle_buffer_size, length_buckets=boundaries,
            group_by_length=grouped,
            batches_per_update=settings.gradient_accumulation_steps, packing=packing),
        steps, state.chief, boundaries, packing))
  result["global_step"] = int(run_.global_step.numpy())
  if packed:  # the unpacked copy callers feed the encoder's inputs (run_result.py)
    result.copy_model(lambda: unpacked_model(run_.model, lambda: task.build_model(
        state.config, state.inputs, packed=False)), state.strategy)
  else:
    result["model"] = run_.model
  result.update(task.evaluate(state, result))
  if state.teacher is not None and state.chief:
    teaching.merge_results_files(settings.output_dir, task.results_files)
  if settings.do_train and settings.export and state.chief and exporter is not None:
    info = state.inputs.info
    if task.export_info is not None:
      info = task.export_info(settings, info, result)
    step = result["global_step"]
    result["export_dir"] = run_folder.export_once(
        settings, exporter.model_name, step, lambda: exporter.export(
            run_.model, state.config, settings, info, version=step))
  if not state.chief:
    io.remove(state.record_dir)
  return result


def _loop_task(task: FineTuningTask, state: RunState) -> loop.Task:
  """The task's loss; with --teacher, mixed with the soft targets of state.teacher (loaded by
  _teach before the first step)."""
  loop_task = task.loss(state.inputs)
  if not state.settings.teacher:
    return loop_task

  def teacher_outputs(batch):
    if features.TEACHER_OUTPUTS in batch:  # the step ran the teacher for every loss already
      return batch[features.TEACHER_OUTPUTS]
    if state.cached:
      return teaching.cached_batch_outputs(task.cache_layout, state.cached, batch)
    return state.teacher.outputs(loop_task.model_inputs)(batch)

  distilled = task.distill(state.inputs, teacher_outputs, state.settings.distill_temperature,
                           state.settings.distill_alpha)
  if state.intermediate is None:
    return distilled
  return features.distilled_task(
      distilled, lambda batch: distill_predictions.frozen_outputs(
          state.teacher_features, loop_task.model_inputs)(batch), state.intermediate)


def _teach(task: FineTuningTask, state: RunState, packed: bool) -> Dict[str, Any]:
  """With --teacher: loads the teacher into state.teacher and evaluates it first (with the
  task's evaluate, in output_dir/teacher/); its teacher_-prefixed results."""
  settings = state.settings
  if not settings.teacher:
    return {}
  state.teacher = teaching.load_teacher(
      settings, lambda config: task.build_model(config, state.inputs, packed=packed),
      state.strategy)
  if state.intermediate is not None:
    with state.strategy.scope():
      state.teacher_features = features.teacher_feature_model(state.intermediate,
                                                              state.teacher.model)
  trainer = state.teacher_trainer = loop.Trainer(
      state.strategy, state.teacher.model, None, task.loss(state.inputs), settings.train_batch_size)
  output_dir = teaching.teacher_dir(settings.output_dir)
  if state.chief:
    io.makedirs(output_dir)
  teacher_state = dataclasses.replace(
      state, trainer=trainer, settings=dataclasses.replace(settings, output_dir=output_dir))
  results = teaching.evaluate_teacher(task.evaluate, state, teacher_state)
  if state.chief and not io.listdir(output_dir):  # nothing evaluated: no empty folder left
    io.remove(output_dir)
  return results


def _cache_teacher(task: FineTuningTask, state: RunState, train_path: str, count: int) -> None:
  """--cache_teacher: the teacher's outputs on every training record, written into the records
  (read back by `dataset` while training); a cache stamped for another teacher or other inputs
  is refused first. Predicted with state.teacher_trainer, whose step the teacher's dev
  evaluation traced (predict_keep: the same step serves both where the batches' shapes agree,
  as packed rows' do at any batch size).

  Per-position outputs are predicted at the records' full length (fine_tuning.predict's
  sequence_length); those kept at every position, padding included (teaching.EVERY_POSITION),
  from batches not cut to length buckets, so that a padding position holds the teacher's own
  logit there, as the teacher in the step gives it (packed rows never read padding)."""
  settings = state.settings
  stamp = teaching.cache_stamp(settings, state.inputs.info)
  teaching.check_cache_stamp(state.record_dir, stamp)
  trainer = state.teacher_trainer  # its predict step traced by the dev evaluation, if any
  per_position = task.cache_layout != teaching.PER_EXAMPLE
  if task.cache_layout == teaching.EVERY_POSITION and not settings.packing_mode.packed:
    settings = dataclasses.replace(settings, length_buckets=length_buckets.NONE)
  spec = task.record_spec(state.inputs, settings.max_seq_length, False)
  keep = (teaching.REAL_EXAMPLE,) if teaching.REAL_EXAMPLE in spec else ()
  outputs = predict(task, dataclasses.replace(state, trainer=trainer, settings=settings),
                    train_path, settings.train_batch_size, count, keep=keep,
                    sequence_length=settings.max_seq_length if per_position else None)
  real = (outputs[teaching.REAL_EXAMPLE].reshape(-1) > 0 if keep  # not the last batch's padding
          else np.ones(len(outputs[task.cached_outputs[0]]), bool))
  cached = {name: outputs[name][real] for name in task.cached_outputs}
  for name, values in cached.items():
    if len(values) != count:
      raise TrainingError(f"--cache_teacher: {len(values)} teacher {name} for {count} training "
                          f"records in {train_path}")
  teaching.write_cached_outputs(train_path, cached, state.record_dir, stamp, task.cache_layout)
  state.cached = {name: tuple(values.shape[1:]) for name, values in cached.items()}


def training_packing(settings, records: str, micro_batch_per_replica: int
                     ) -> Optional[packed_rows.Packing]:
  """The packing of the training batches (None: unpacked); static packing's rows per replica
  batch come from the training records' lengths (row_packing.static_rows), logged."""
  mode = settings.packing_mode
  if not mode.packed:  # none, or auto (which run() resolves)
    return None
  if mode.exact:
    widths = settings.buckets(settings.max_seq_length) or (settings.max_seq_length,)
    sequences = micro_batch_per_replica * bucketing.sequences_per_record(
        records, settings.max_seq_length)
    ladder = row_packing.row_ladder(sequences)
    logging.info("  Packed rows (exact): %d sequences per replica batch in the fewest rows; "
                 "row counts %s, widths %s: at most %d batch shapes", sequences,
                 ",".join(map(str, ladder)), ",".join(map(str, widths)),
                 len(ladder) * len(widths))
    return packed_rows.Packing(mode.value)
  counts = bucketing.length_counts(records, settings.max_seq_length)
  rows = row_packing.static_rows(counts, micro_batch_per_replica, settings.max_seq_length)
  logging.info("  Packed rows (static): %d rows of %d per replica batch, about %d examples on "
               "average (fitted to %s)", rows, settings.max_seq_length,
               micro_batch_per_replica, records)
  return packed_rows.Packing(mode.value, rows=rows)


def eval_packing(settings) -> Optional[packed_rows.Packing]:
  """Eval and predict batches are packed exactly (the same examples per batch, so the same
  results) whenever --packing is not none."""
  if not settings.packing_mode.packed:
    return None  # none, or auto not resolved by run() (none)
  return packed_rows.Packing(row_packing.EXACT)


def unpacked_model(model: keras.Model, build: Callable[[], keras.Model]) -> keras.Model:
  """The model build() makes (the unpacked one, under the caller's strategy scope and dtype
  policy) holding `model`'s weights: what a run returns when it trained on packed rows, so
  that callers feed it the encoder's inputs as before."""
  copy = build()
  checkpoints.set_original_weights(copy, checkpoints.get_original_weights(model),
                                   source=model.name)
  return copy


def eval_buckets(settings, path: str, rows: int) -> Optional[Tuple[int, ...]]:
  """The length buckets of eval or predict batches of `rows` records of the file `path`:
  fitted to the file (settings.record_buckets); with --packing, the fixed ladder, which are
  the widths packed rows choose from."""
  if eval_packing(settings) is not None:
    return settings.buckets(settings.max_seq_length)
  return settings.record_buckets(path, settings.max_seq_length, rows)


def dataset(task: FineTuningTask, state: RunState, path: str, batch_size: int,
            is_training: bool, **options) -> tf.data.Dataset:
  """The batches of one of the task's record files (input_pipeline.record_dataset with the
  task's record spec; options are record_dataset's)."""
  spec = task.record_spec(state.inputs, state.settings.max_seq_length, is_training)
  if is_training and state.cached:
    spec = dict(spec, **teaching.cached_record_spec(task.cache_layout, state.cached))
  return input_pipeline.record_dataset(path, input_pipeline.parsing_spec(spec), batch_size,
                                       is_training, **options)


def eval_dataset(task: FineTuningTask, state: RunState, path: str, batch_size: int,
                 num_examples: int):
  """An iterator (distribution.data_iterator) over every record of an eval or predict file, each
  exactly once (the last batch padded with weight-0 rows), cut to --length_buckets (packed
  with --packing)."""
  settings = state.settings
  boundaries = eval_buckets(
      settings, path,
      distribution.BatchShares(batch_size, state.strategy.num_replicas_in_sync).per_replica)

  def dataset_fn(ctx):
    return dataset(task, state, path, batch_size, is_training=False, input_context=ctx,
                   num_examples=num_examples, length_buckets=boundaries,
                   packing=eval_packing(settings))

  return distribution.data_iterator(state.strategy, dataset_fn)


def predict(task: FineTuningTask, state: RunState, path: str, batch_size: int,
            num_examples: int, keep: Tuple[str, ...] = (),
            sequence_length: Optional[int] = None) -> Dict[str, np.ndarray]:
  """The trained model's outputs for every record of an eval or predict file, in file order
  (evaluation.predict over eval_dataset: every task's eval and predict batches come through here).

  Args:
    keep: batch entries returned beside the outputs (e.g. label_ids).
    sequence_length: pad per-position outputs of cut batches back to it (evaluation.predict).
  """
  kept = predict_keep(task, state, keep)
  outputs = evaluation.predict(state.trainer,
                               eval_dataset(task, state, path, batch_size, num_examples),
                               input_pipeline.eval_steps(num_examples, batch_size), keep=kept,
                               sequence_length=sequence_length)
  extra = set(kept) - set(keep)
  return {key: value for key, value in outputs.items() if key not in extra}


def predict_keep(task: FineTuningTask, state: RunState, keep: Sequence[str]) -> Tuple[str, ...]:
  """The batch entries a predict step returns for a caller asking for `keep`: those and every
  per-example entry of the task's records (one value a record), in one order. The traced
  predict step is keyed on them, so predictions of one model with different wishes (the
  teacher's dev evaluation, then its --cache_teacher pass) share one trace: tracing and
  optimizing the step costs more CPU than predicting a few hundred short records."""
  spec = task.record_spec(state.inputs, state.settings.max_seq_length, False)
  return tuple(sorted(set(keep) | {name for name, (shape, _) in spec.items() if not shape}))


@contextlib.contextmanager
def bad_input_as_training_error():
  """Reading a run's inputs: a missing file or bad data (FileNotFoundError, ValueError) stops
  the run as a TrainingError with the reader's message."""
  try:
    yield
  except (FileNotFoundError, ValueError) as e:
    if isinstance(e, TrainingError):
      raise
    raise TrainingError(str(e)) from None


# === Weights the run starts from, and training ===


def init_fine_tuning(run: loop.Run, settings, start: start_lib.Start, head_layer: str,
                     head_name: str, refusal: str, fresh_head: Optional[str] = None) -> Set[str]:
  """Loads settings.init_checkpoint into a run that does not resume, logs the variables, and
  refuses to go on without training when the task's head was never trained.

  Args:
    run: from loop.prepare_run (which restored output_dir's newest checkpoint when resuming).
    settings: with init_checkpoint, do_train and output_dir.
    start: where the run starts (start.find_start).
    head_layer: the head's dense layer (its kernel tells whether the head was loaded).
    head_name: the head's original variable names, for the message.
    refusal: the end of the message: why an untrained head is refused and what to do.
    fresh_head: why the checkpoint's head must not be loaded (another kind of head, other
      labels): only the layers below the head are, whatever the shapes of the head's weights.

  Returns:
    The paths of the variables restored from init_checkpoint.
  """
  head = run.model.get_layer(head_layer)
  head_trained = start.resuming
  restored: Set[str] = set()
  if not start.resuming and settings.init_checkpoint:
    target = run.model
    if fresh_head:
      # The layers below the head, sharing the model's variables: the head is not in it.
      target = keras.Model(run.model.inputs, head.input, name=f"{run.model.name}_without_head")
      logging.warning("The %s starts from random weights: %s", head_name, fresh_head)
    restored = loop.load_init_checkpoint(target, settings.init_checkpoint,
                                         settings.init_layers)
    head_trained = head.kernel.path in restored
    logging.info("Loaded %d of the model's %d trainable variables from --init_checkpoint=%s",
                 len(restored), len(run.model.trainable_variables), settings.init_checkpoint)
  loop.log_variables(run.model, restored)
  if not settings.do_train and not head_trained:
    raise TrainingError(
        f"the {head_name} was never trained: "
        + (f"--init_checkpoint={settings.init_checkpoint} holds no such head"
           if settings.init_checkpoint else "no --init_checkpoint and no checkpoint in "
           f"--output_dir={settings.output_dir}")
        + "; " + refusal)
  return restored


def fine_tune(run: loop.Run, settings, dataset_fn: Callable[..., tf.data.Dataset],
              num_train_steps_: int, chief: bool,
              boundaries: Optional[Sequence[int]],
              packing: Optional[packed_rows.Packing] = None) -> Dict[str, float]:
  """Trains a fine-tuning run to num_train_steps_ (resuming where its checkpoint left off).

  dataset_fn(micro_batch, input_context) gives the per-replica training batches of
  train_batch_size / gradient_accumulation_steps examples, cut to `boundaries` (for the log),
  packed as `packing` says; they are grouped per update here.
  """
  micro_batch = distribution.BatchShares(settings.train_batch_size,
                                         accumulation=settings.gradient_accumulation_steps
                                         ).micro_batch
  if packing is not None and packing.static:
    logging.info("  Batches: packed rows of %d (static)", settings.max_seq_length)
  else:
    logging.info("  Batches: %s%s%s", length_buckets.describe(boundaries,
                                                              settings.max_seq_length),
                 ", grouped by length" if settings.grouped(settings.max_seq_length) else "",
                 ", packed rows (exact)" if packing is not None else "")

  def update_batches(ctx):
    dataset = dataset_fn(micro_batch, ctx)
    if settings.gradient_accumulation_steps > 1:
      # Micro-batches cut to different length buckets are padded to the longest of the update
      # (itself a bucket): zeros are padding positions (input_mask 0, label_mask 0).
      dataset = dataset.padded_batch(settings.gradient_accumulation_steps, drop_remainder=True)
    return dataset

  iterator = distribution.resumed_iterator(run.trainer.strategy, update_batches, run.global_step)
  return loop.train(run.trainer, iterator, run.global_step, run.checkpoint.manager,
                    num_train_steps_, settings.iterations_per_loop,
                    settings.save_checkpoints_steps, settings.output_dir, chief)
