"""run_classifier as a library: records, fine-tuning, evaluation, prediction, export; seeds and
the paper's hyperparameter sweep.

`run_classifier(config, settings)` is what `python -m bert_tf.run_classifier` runs. It follows
the original run_classifier.py's main():

* The processor reads the task's files; every file a run needs is read before anything is
  written, so a bad row stops the run with no partial output.
* train.tf_record, eval.tf_record and predict.tf_record are written to output_dir with the
  original's features (classifier_data); eval and predict examples are padded with
  PaddingInputExample to a multiple of the batch only with use_tpu, as the original did.
* num_train_steps = int(len(train_examples) / train_batch_size * num_train_epochs) and
  num_warmup_steps = int(num_train_steps * warmup_proportion); the original's AdamWeightDecay
  and schedule (training.optimization); the head is bert_tf.tasks.classifier.loss's.
* eval_results.txt holds the original's eval_accuracy, eval_loss, global_step and loss, plus
  the task's GLUE metric (F1 and Matthews correlation for two-label tasks, Pearson and Spearman
  for STS-B). Evaluation and prediction see every example exactly once on every strategy (the
  pipeline pads the last batch with weight-0 examples instead of dropping it).
* test_results.tsv holds the class probabilities of each test example, tab-separated, as the
  original writes them (a regression task writes its score); test_predictions.tsv adds a header,
  the guid and the predicted label.

Beyond the original: MNLI is also evaluated and predicted on its mismatched sets (files with the
suffix _mismatched); checkpoints resume like run_pretraining's; evaluating or predicting with a
classifier head that was never trained is refused (google-research/bert#1037); the tokenizer is
checked against the checkpoint's (bert_tf.model.provenance); the command exports a trained model
as a raw-text classifier for TF Serving (output_dir/export/classifier/<step>/,
tasks.classifier.export).

The run's steps (lock, output_dir, tokenizer checks, resume, init_checkpoint, training, export)
are tasks.fine_tuning's; this module holds what is the classifier's own: its examples and
labels, its records, its evaluation and prediction files, and the GLUE metric sweeps rank by.
"""

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from absl import logging
import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.tasks import augmenting
from bert_tf.tasks import common
from bert_tf.tasks import fine_tuning
from bert_tf.tasks import repeats
from bert_tf.tasks import start as start_lib
from bert_tf.tasks.classifier import data as classifier_data
from bert_tf.tasks.classifier import head as classifier_head
from bert_tf.tasks.classifier import loss as classifier
from bert_tf.tasks.classifier import processors as classifier_processors
from bert_tf.training import evaluation
from bert_tf.training import input_pipeline
from bert_tf.training.errors import TrainingError

GENERIC_TASK = "generic"
MISMATCHED = "_mismatched"

# The metric a sweep or a seed summary ranks runs by, per task (the GLUE leaderboard's).
PRIMARY_METRICS = {"cola": "eval_matthews_corrcoef", "sts-b": "eval_pearson",
                   "stsb": "eval_pearson", "mrpc": "eval_f1", "qqp": "eval_f1"}

Column = Union[int, str]


# === Settings ===


@dataclasses.dataclass(frozen=True)
class ClassifierSettings(common.FineTuningSettings):
  """Everything a run_classifier run needs besides the model config (names follow the flags).

  The shared run settings are common.FineTuningSettings' (use_tpu here only decides the
  PaddingInputExample padding of the records; the strategy comes from the caller). The
  original's: task_name, data_dir, output_dir, vocab_file, max_seq_length, do_eval, do_predict,
  eval/predict_batch_size. Additions: xnli_language; the generic task's columns and files
  (text_a_column, text_b_column, label_column, guid_column: names or 0-based indices;
  has_header; label_list (label_list_file: the file it was read from, named in messages);
  regression; file_format; delimiter; train_file, dev_file, test_file); transfer_file
  (unlabelled inputs the --teacher labels, read_transfer_file); distill_augment (altered
  copies of each labelled input the --teacher labels, altered_copies).
  """
  task_name: str
  data_dir: str
  output_dir: str
  vocab_file: str
  max_seq_length: int = 128
  do_eval: bool = False
  do_predict: bool = False
  eval_batch_size: int = 8
  predict_batch_size: int = 8
  xnli_language: str = "zh"
  text_a_column: Optional[Column] = None
  text_b_column: Optional[Column] = None
  label_column: Optional[Column] = None
  guid_column: Optional[Column] = None
  has_header: Optional[bool] = None
  label_list: Tuple[str, ...] = ()
  label_list_file: Optional[str] = None  # where label_list was read from (for messages)
  regression: bool = False
  file_format: Optional[str] = None
  delimiter: Optional[str] = None
  train_file: Optional[str] = None
  dev_file: Optional[str] = None
  test_file: Optional[str] = None
  transfer_file: Optional[str] = None
  distill_augment: int = 0

  def check(self, config: BertConfig, num_replicas: int = 1) -> None:
    """Raises TrainingError naming every flag with an impossible value."""
    problems = []
    if self.max_seq_length <= 0:
      problems.append(f"--max_seq_length must be positive, got {self.max_seq_length}")
    if self.max_seq_length > config.max_position_embeddings:
      problems.append(f"Cannot use sequence length {self.max_seq_length} because the BERT "
                      f"model was only trained up to sequence length "
                      f"{config.max_position_embeddings} (--max_seq_length)")
    problems += common.fine_tuning_problems(self, num_replicas)
    if not (self.do_train or self.do_eval or self.do_predict):
      problems.append("At least one of `do_train`, `do_eval` or `do_predict' must be True.")
    generic = self.task_name.lower() == GENERIC_TASK
    if generic and self.text_a_column is None:
      problems.append("--task_name=generic needs --text_a_column (and --label_column for "
                      "training and eval)")
    if not generic:
      given = [name for name in ("text_a_column", "text_b_column", "label_column",
                                 "guid_column", "has_header", "file_format", "delimiter",
                                 "train_file", "dev_file", "test_file")
               if getattr(self, name) is not None]
      given += [name for name in ("label_list", "regression") if getattr(self, name)]
      if given:
        problems.append(f"--{', --'.join(given)} apply only to --task_name=generic (the "
                        f"{self.task_name} task has fixed files and columns)")
    problems += common.transfer_file_problems(self.transfer_file, self.teacher)
    if self.transfer_file and self.regression:
      problems.append("--transfer_file applies to classification, not --regression")
    problems += augmenting.copies_problems(self.distill_augment, self.teacher)
    if self.distill_augment and self.regression:
      problems.append("--distill_augment applies to classification, not --regression")
    if problems:
      raise TrainingError("; ".join(problems))


def make_processor(settings: ClassifierSettings) -> classifier_processors.DataProcessor:
  """The task's processor: one of classifier_processors.PROCESSORS, or a GenericProcessor."""
  name = settings.task_name.lower()
  if name == GENERIC_TASK:
    files = {key: value for key, value in (("train_file", settings.train_file),
                                           ("dev_file", settings.dev_file),
                                           ("test_file", settings.test_file)) if value}
    return classifier_processors.GenericProcessor(
        settings.text_a_column, settings.text_b_column, settings.label_column,
        has_header=settings.has_header, label_list=list(settings.label_list) or None,
        is_regression=settings.regression, file_format=settings.file_format,
        delimiter=settings.delimiter, guid_column=settings.guid_column, **files)
  if name == "xnli":
    return classifier_processors.get_processor(name, language=settings.xnli_language)
  return classifier_processors.get_processor(name)


def parse_column(value: Optional[str]) -> Optional[Column]:
  """A column flag: an integer (0-based index, negative from the end) or a name."""
  if value is None or value == "":
    return None
  text = value.strip()
  try:
    return int(text)
  except ValueError:
    return text


# === Examples of a run ===


def _is_pair_task(examples: Sequence[classifier_data.InputExample]) -> bool:
  return any(getattr(e, "text_b", None) for e in examples)


def _evaluation_sets(processor, data_dir: str, split: str
                     ) -> List[Tuple[str, List[classifier_data.InputExample]]]:
  """[(suffix, examples)]: the task's dev or test set, plus MNLI's mismatched one when its
  file is there (the original read the matched set only)."""
  getter = {"dev": processor.get_dev_examples, "test": processor.get_test_examples}[split]
  sets = [("", getter(data_dir))]
  mismatched = getattr(processor, f"get_{split}_mismatched_examples", None)
  if mismatched is not None:
    try:
      sets.append((MISMATCHED, mismatched(data_dir)))
    except FileNotFoundError as e:
      logging.info("%s: only the matched %s set is scored", e, split)
  return sets


def _label_list(processor, settings: ClassifierSettings,
                start: start_lib.Start) -> start_lib.StartingHead:
  """The labels in id order (None: regression), reconciled with the fine-tuned model the run
  starts from (start.starting_head: its task_info.json is the truth about its labels). A
  generic task without --label_list takes them from its training file when training, else
  from that model."""
  is_generic = isinstance(processor, classifier_processors.GenericProcessor)
  labels: Optional[List[str]] = None
  how: Optional[str] = "explicit"
  if settings.regression or not is_generic:
    labels = None if settings.regression else processor.get_labels()
  elif settings.label_list:
    labels = list(settings.label_list)
  elif settings.do_train or not start.records_labels:
    try:
      labels, how = processor.get_labels(settings.data_dir), "training"
    except FileNotFoundError as e:
      if settings.do_train:
        raise TrainingError(f"{e}: without --label_list the labels come from the training "
                                 "file") from None
      how = None  # refused by starting_head, naming the flags that give them
  else:
    how = None  # the fine-tuned model's
  return start_lib.starting_head(settings, start, classifier_head.CLASSIFIER, labels, how,
                                 "--label_list", settings.label_list_file)


# === The run: what run_classifier does around the driver (tasks.fine_tuning) ===


def _read(settings: ClassifierSettings, start: start_lib.Start,
          vocab_md5: str) -> fine_tuning.TaskInputs:
  """Every example the run needs and its labels, reconciled with the model it starts from."""
  processor = make_processor(settings)
  head = _label_list(processor, settings, start)
  label_list = head.labels
  if isinstance(processor, classifier_processors.GenericProcessor):
    # The files are read (and their labels checked) with the labels in the model's order.
    processor = make_processor(dataclasses.replace(
        settings, label_list=tuple(label_list or ()), regression=label_list is None))
  data = _read_data(processor, settings)
  data["labels"] = label_list
  data["transfer"] = read_transfer_file(settings.transfer_file, data["pair"]) \
      if settings.transfer_file and settings.do_train else []
  data["copies"] = altered_copies(data["train"], settings) \
      if settings.distill_augment and settings.do_train else []
  info = dict(task_name=settings.task_name.lower(), labels=label_list,
              regression=label_list is None, pair=data["pair"],
              do_lower_case=bool(settings.do_lower_case), vocab_md5=vocab_md5,
              max_seq_length=settings.max_seq_length, head=classifier_head.CLASSIFIER)
  outputs = [f"{kind}{suffix}{ext}" for suffix in ("", MISMATCHED) for kind, ext in (
      ("train", ".tf_record"), ("eval", ".tf_record"), ("predict", ".tf_record"),
      ("eval_results", ".txt"), ("test_results", ".tsv"), ("test_predictions", ".tsv"))]
  inputs = {f"--{split}_file": _data_file(processor, settings, split)
            for split in ("train", "dev", "test")}
  inputs["--transfer_file"] = settings.transfer_file
  return fine_tuning.TaskInputs(
      data=data, info=info, fresh_head=head.fresh_head,
      train_files=[_data_file(processor, settings, "train"), settings.transfer_file],
      made_data=fine_tuning.made_data_digest("--distill_augment", [
          (e.text_a, e.text_b) for e in data["copies"]]),
      outputs=outputs, inputs=inputs, result={"label_list": label_list})


def altered_copies(examples: Sequence[classifier_data.InputExample],
                   settings: ClassifierSettings) -> List[classifier_data.InputExample]:
  """--distill_augment's inputs: settings.distill_augment altered copies of each labelled
  example (tasks/augmenting.py, drawn with --seed, 0 when unset), without labels."""
  fields = [tuple(tuple(text.split()) for text in (e.text_a, e.text_b) if text is not None)
            for e in examples]
  copies = augmenting.altered_copies(fields, settings.distill_augment, settings.seed or 0)
  return [classifier_data.InputExample(
      guid=f"copy-{number}-of-{examples[index].guid}", text_a=" ".join(texts[0]),
      text_b=" ".join(texts[1]) if len(texts) > 1 else None, label=classifier_data.UNLABELLED)
          for number, (index, texts) in enumerate(copies, 1)]


def read_transfer_file(path: str, pair: bool) -> List[classifier_data.InputExample]:
  """The unlabelled inputs of --transfer_file: one per non-blank line, the line's text (a pair
  task: text_a TAB text_b); their label is classifier_data.UNLABELLED.

  Raises:
    TrainingError: a missing or empty file, or a pair task's line without exactly one tab
      (naming the file and line).
  """
  if not io.exists(path):
    raise TrainingError(f"--transfer_file={path} does not exist")
  examples = []
  for number, line in enumerate(io.read_text(path).splitlines(), 1):
    if not line.strip():
      continue
    fields = line.split("\t") if pair else [line]
    if len(fields) != (2 if pair else 1):
      raise TrainingError(f"{path}:{number}: a pair task's transfer line is text_a TAB text_b, "
                          f"got {len(fields)} fields")
    examples.append(classifier_data.InputExample(
        guid=f"transfer-{number}", text_a=fields[0].strip(),
        text_b=fields[1].strip() if pair else None, label=classifier_data.UNLABELLED))
  if not examples:
    raise TrainingError(f"--transfer_file={path} has no line of text")
  return examples


def _data_file(processor, settings: ClassifierSettings, split: str) -> str:
  """The file of a split ("train", "dev", "test") a run reads: the generic task's --train_file
  (--dev_file, --test_file) in data_dir or as a path, else data_dir's <split>.tsv (the GLUE
  processors' names)."""
  name = f"{split}.tsv"
  if isinstance(processor, classifier_processors.GenericProcessor):
    name = processor.files[split]
    if name.startswith("/") or "://" in name:
      return name
  return io.join(settings.data_dir, name)


def _read_data(processor, settings: ClassifierSettings) -> Dict[str, Any]:
  """Every example the run needs, read before anything is written."""
  data: Dict[str, Any] = {"train": None, "dev": [], "test": []}
  if settings.do_train:
    data["train"] = processor.get_train_examples(settings.data_dir)
    if not data["train"]:
      raise TrainingError(f"{processor.source(settings.data_dir, 'train')}: the "
                          f"{settings.task_name} training set has no example")
  if settings.do_eval:
    data["dev"] = _evaluation_sets(processor, settings.data_dir, "dev")
  if settings.do_predict:
    data["test"] = _evaluation_sets(processor, settings.data_dir, "test")
  for split in ("dev", "test"):
    for suffix, examples in data[split]:
      if not examples:
        raise TrainingError(f"{processor.source(settings.data_dir, split + suffix)}: the "
                            f"{settings.task_name} {split}{suffix} set has no example")
  every = list(data["train"] or []) + [e for _, ex in data["dev"] + data["test"] for e in ex]
  data["pair"] = _is_pair_task(every)
  return data


def _write_records(state: fine_tuning.RunState, examples, path: str,
                   batch_size: Optional[int] = None) -> int:
  """The original's records of `examples` at path; eval and predict examples are padded with
  PaddingInputExample to a multiple of batch_size only with use_tpu, as the original did."""
  settings = state.settings
  examples = list(examples)
  if batch_size is not None and settings.use_tpu:
    classifier_data.pad_for_tpu(examples, batch_size)
  return classifier_data.file_based_convert_examples_to_features(
      examples, state.inputs.data["labels"], settings.max_seq_length, state.tokenizer, path)


def _train_records(state: fine_tuning.RunState, path: str) -> fine_tuning.TrainingRecords:
  data = state.inputs.data
  labelled, transfer, copies = data["train"], data["transfer"], data["copies"]
  examples = list(labelled) + list(transfer) + list(copies)
  _write_records(state, examples, path)
  log = f"Num examples = {len(examples)}"
  if transfer or copies:
    made = [f"{len(transfer)} from --transfer_file"] if transfer else []
    made += [f"{len(copies)} altered copies (--distill_augment="
             f"{state.settings.distill_augment})"] if copies else []
    log += f" ({len(labelled)} labelled, {', '.join(made)}, labelled by the teacher only)"
  return fine_tuning.TrainingRecords(len(examples), "examples", log=(log,))


def _build_model(config: BertConfig, inputs: fine_tuning.TaskInputs, packed: bool = False):
  labels = inputs.data["labels"]
  return classifier_head.build_classifier_model(config, None if labels is None else len(labels),
                                      packed=packed)


def _loss(inputs: fine_tuning.TaskInputs):
  return classifier.REGRESSION_TASK if inputs.data["labels"] is None else classifier.TASK


def _distill(inputs: fine_tuning.TaskInputs, teacher_outputs, temperature: float,
             alpha: float):
  return classifier.distillation_task(teacher_outputs, temperature, alpha,
                                      regression=inputs.data["labels"] is None)


def _record_spec(inputs: fine_tuning.TaskInputs, max_seq_length: int, is_training: bool):
  del is_training  # the same records for training, evaluation and prediction
  return classifier_data.record_spec(max_seq_length, regression=inputs.data["labels"] is None)


def _evaluate(state: fine_tuning.RunState, result: Dict[str, Any]) -> Dict[str, Any]:
  """Evaluates on the dev set(s) (eval_results.txt) and predicts the test set(s)
  (test_results.tsv, test_predictions.tsv)."""
  out: Dict[str, Any] = {}
  for suffix, examples in state.inputs.data["dev"]:
    results = _evaluate_set(state, examples, suffix, result["global_step"])
    if suffix:
      out[suffix.strip("_")] = results
    else:
      out.update(results)
  for suffix, examples in state.inputs.data["test"]:
    out[f"test_results{suffix}"] = _predict_set(state, examples, suffix)
  return out


def _predictions(state: fine_tuning.RunState, examples, name: str, batch_size: int):
  """(logits [N, C] of the real examples in order, label_ids [N]) from the written records."""
  path = io.join(state.record_dir, f"{name}.tf_record")
  count = _write_records(state, examples, path, batch_size)
  num_steps = input_pipeline.eval_steps(count, batch_size)
  logging.info("  Num examples = %d (%d actual, %d padding)", count, len(examples),
               count - len(examples))
  logging.info("  Batch size = %d, %d batches", batch_size, num_steps)
  out = fine_tuning.predict(TASK, state, path, batch_size, count,
                           keep=(classifier_data.LABEL_IDS, classifier_data.IS_REAL_EXAMPLE))
  real = out["is_real_example"] > 0
  if int(real.sum()) != len(examples):
    raise TrainingError(f"{path}: {int(real.sum())} real examples predicted, "
                             f"expected {len(examples)}")
  return out["logits"][real].astype(np.float32), out["label_ids"][real]


def _evaluate_set(state: fine_tuning.RunState, examples, suffix: str, step: int
                  ) -> Dict[str, float]:
  settings = state.settings
  logging.info("***** Running evaluation%s *****", suffix.replace("_", " "))
  logits, labels = _predictions(state, examples, f"eval{suffix}", settings.eval_batch_size)
  results = classifier.results_from_predictions(
      logits, labels, settings.eval_batch_size, regression=state.inputs.data["labels"] is None)
  results["global_step"] = step
  logging.info("***** Eval results%s *****", suffix.replace("_", " "))
  for key in sorted(results):
    logging.info("  %s = %s", key, results[key])
  if state.chief:
    evaluation.write_eval_results(io.join(settings.output_dir, f"eval_results{suffix}.txt"),
                            results)
  return results


def probabilities(logits: np.ndarray) -> np.ndarray:
  """Softmax over the last axis in float32 (the original's tf.nn.softmax output)."""
  logits = logits.astype(np.float32)
  shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
  return (shifted / shifted.sum(axis=-1, keepdims=True)).astype(np.float32)


def _predict_set(state: fine_tuning.RunState, examples, suffix: str) -> str:
  settings = state.settings
  label_list = state.inputs.data["labels"]
  logging.info("***** Running prediction%s *****", suffix.replace("_", " "))
  logits, _ = _predictions(state, examples, f"predict{suffix}", settings.predict_batch_size)
  path = io.join(settings.output_dir, f"test_results{suffix}.tsv")
  if not state.chief:
    return path
  if label_list is None:
    values = logits[:, :1]
    header = ["guid", "score"]
    predicted = [None] * len(examples)
  else:
    values = probabilities(logits)
    header = ["guid", "label"] + list(label_list)
    predicted = [label_list[i] for i in np.argmax(values, axis=-1)]
  # The original: str() of each numpy float32, tab-separated, one line per real example.
  io.write_text(path, "".join("\t".join(str(v) for v in row) + "\n" for row in values))
  lines = ["\t".join(header) + "\n"]
  for example, label, row in zip(examples, predicted, values):
    cells = [example.guid] + ([] if label is None else [label]) + [str(v) for v in row]
    lines.append("\t".join(cells) + "\n")
  io.write_text(io.join(settings.output_dir, f"test_predictions{suffix}.tsv"),
                "".join(lines))
  logging.info("Wrote %d predictions to %s", len(examples), path)
  return path


TASK = fine_tuning.FineTuningTask(
    program="run_classifier", head=classifier_head.CLASSIFIER,
    head_layer=classifier_head.HEAD_LAYER,
    head_name="classifier head (output_weights/output_bias)",
    untrained=("evaluating or predicting it would give random results "
               "(google-research/bert#1037). Add --do_train, or point --init_checkpoint at a "
               "fine-tuned classifier"),
    read=_read, train_records=_train_records, build_model=_build_model, loss=_loss,
    record_spec=_record_spec, evaluate=_evaluate, distill=_distill,
    results_files=tuple(f"eval_results{suffix}.txt" for suffix in ("", MISMATCHED)),
    cached_outputs=("logits",))


def run_classifier(config: BertConfig, settings: ClassifierSettings,
                   strategy: Optional[tf.distribute.Strategy] = None,
                   exporter: Optional[fine_tuning.Exporter] = None) -> Dict[str, Any]:
  """Fine-tunes, evaluates and/or predicts; resumes from output_dir if it holds a checkpoint;
  exports with `exporter` after training (the command hands in classifier_export.EXPORTER).

  Returns:
    A dict with global_step, model, num_train_steps (when training), eval results (prefixed
    by nothing for the main dev set, e.g. eval_accuracy; a `mismatched` dict for MNLI), the
    paths written (test_results, export_dir) and the label list.

  Raises:
    TrainingError: as fine_tuning.run.
  """
  return fine_tuning.run(TASK, config, settings, strategy, exporter)


# === Several seeds, and the paper's sweep (tasks.fine_tuning), ranked by the GLUE metric ===


def primary_metric(task_name: str, regression: bool) -> str:
  """The metric runs are ranked by: the GLUE metric of the task, else accuracy."""
  name = task_name.lower()
  if name in PRIMARY_METRICS:
    return PRIMARY_METRICS[name]
  return "eval_pearson" if regression else "eval_accuracy"


def run_seeds(config: BertConfig, settings: ClassifierSettings, seeds: Sequence[int],
              strategy=None, runner: Optional[repeats.Runner] = None) -> Dict[str, Any]:
  """repeats.run_seeds of run_classifier (or `runner`): one run per seed in
  <output_dir>/seed_<s>, and seeds_summary.txt."""
  return repeats.run_seeds(config, settings, seeds, runner or run_classifier, strategy)


def run_sweep(config: BertConfig, settings: ClassifierSettings,
              learning_rates: Sequence[float] = (5e-5, 3e-5, 2e-5),
              epochs: Sequence[float] = (2.0, 3.0, 4.0), batch_sizes: Sequence[int] = (16, 32),
              seeds: Sequence[int] = (), strategy=None, keep_all_checkpoints: bool = False,
              runner: Optional[repeats.Runner] = None) -> Dict[str, Any]:
  """repeats.run_sweep of run_classifier (or `runner`), ranked by the task's GLUE metric
  (primary_metric; accuracy when a point's results lack it)."""

  def ranked_by(means: Mapping[str, float]) -> str:
    metric = primary_metric(settings.task_name, "eval_pearson" in means)
    return metric if metric in means else "eval_accuracy"

  return repeats.run_sweep(config, settings, runner or run_classifier, ranked_by,
                               learning_rates, epochs, batch_sizes, seeds, strategy,
                               keep_all_checkpoints)
