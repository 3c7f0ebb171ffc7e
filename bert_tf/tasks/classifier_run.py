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
  and schedule (training.optimization); the head is bert_tf.tasks.classifier's.
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
checked against the checkpoint's (tasks.common); a trained model is exported as a raw-text
classifier for TF Serving (output_dir/export/classifier/<step>/).
"""

import dataclasses
import json
import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model import heads
from bert_tf.serving import tf_serving
from bert_tf.tasks import classifier
from bert_tf.tasks import classifier_data
from bert_tf.tasks import common
from bert_tf.training import input_pipeline
from bert_tf.training import loop

GENERIC_TASK = "generic"
EXPORT_DIR = "export"
EXPORT_MODEL_NAME = "classifier"
TEST_RESULTS_FILE = "test_results.tsv"
TEST_PREDICTIONS_FILE = "test_predictions.tsv"
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
  has_header; label_list; regression; file_format; delimiter; train_file, dev_file, test_file).
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
  regression: bool = False
  file_format: Optional[str] = None
  delimiter: Optional[str] = None
  train_file: Optional[str] = None
  dev_file: Optional[str] = None
  test_file: Optional[str] = None

  def check(self, num_replicas: int = 1) -> None:
    """Raises loop.TrainingError naming every flag with an impossible value."""
    problems = []
    if self.max_seq_length <= 0:
      problems.append(f"--max_seq_length must be positive, got {self.max_seq_length}")
    problems += loop.fine_tuning_problems(self, num_replicas)
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
    if problems:
      raise loop.TrainingError("; ".join(problems))


def make_processor(settings: ClassifierSettings) -> classifier_data.DataProcessor:
  """The task's processor: one of classifier_data.PROCESSORS, or a GenericProcessor."""
  name = settings.task_name.lower()
  if name == GENERIC_TASK:
    files = {key: value for key, value in (("train_file", settings.train_file),
                                           ("dev_file", settings.dev_file),
                                           ("test_file", settings.test_file)) if value}
    return classifier_data.GenericProcessor(
        settings.text_a_column, settings.text_b_column, settings.label_column,
        has_header=settings.has_header, label_list=list(settings.label_list) or None,
        is_regression=settings.regression, file_format=settings.file_format,
        delimiter=settings.delimiter, guid_column=settings.guid_column, **files)
  if name == "xnli":
    return classifier_data.get_processor(name, language=settings.xnli_language)
  return classifier_data.get_processor(name)


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
  """[(suffix, examples)]: the task's dev or test set, plus MNLI's mismatched one."""
  getter = {"dev": processor.get_dev_examples, "test": processor.get_test_examples}[split]
  sets = [("", getter(data_dir))]
  mismatched = getattr(processor, f"get_{split}_mismatched_examples", None)
  if mismatched is not None:
    sets.append((MISMATCHED, mismatched(data_dir)))
  return sets


def _label_list(processor, settings: ClassifierSettings) -> common.StartingHead:
  """The labels in id order (None: regression), reconciled with the fine-tuned model the run
  starts from (common.starting_head: its task_info.json is the truth about its labels). A
  generic task without --label_list takes them from its training file when training, else
  from that model."""
  is_generic = isinstance(processor, classifier_data.GenericProcessor)
  labels: Optional[List[str]] = None
  how: Optional[str] = "explicit"
  if settings.regression or not is_generic:
    labels = None if settings.regression else processor.get_labels()
  elif settings.label_list:
    labels = list(settings.label_list)
  elif settings.do_train or not common.recorded_labels(settings):
    try:
      labels, how = processor.get_labels(settings.data_dir), "training"
    except FileNotFoundError as e:
      if settings.do_train:
        raise loop.TrainingError(f"{e}: without --label_list the labels come from the training "
                                 "file") from None
      how = None  # refused by starting_head, naming the flags that give them
  else:
    how = None  # the fine-tuned model's
  return common.starting_head(settings, common.CLASSIFIER_HEAD, labels, how, "--label_list")


# === The run ===


def run_classifier(config: BertConfig, settings: ClassifierSettings,
                   strategy: Optional[tf.distribute.Strategy] = None) -> Dict[str, Any]:
  """Fine-tunes, evaluates and/or predicts; resumes from output_dir if it holds a checkpoint.

  Returns:
    A dict with global_step, model, num_train_steps (when training), eval results (prefixed
    by nothing for the main dev set, e.g. eval_accuracy; a `mismatched` dict for MNLI), the
    paths written (test_results, export_dir) and the label list.

  Raises:
    loop.TrainingError: bad settings or data (naming the flag, the file and line), a tokenizer
      that contradicts the checkpoint, an untrained head, or a non-finite loss.
  """
  strategy = strategy or loop.select_strategy()
  settings.check(strategy.num_replicas_in_sync)
  if settings.max_seq_length > config.max_position_embeddings:
    raise loop.TrainingError(
        f"Cannot use sequence length {settings.max_seq_length} because the BERT model was only "
        f"trained up to sequence length {config.max_position_embeddings} (--max_seq_length)")
  chief = loop.is_chief(strategy)
  existing = io.exists(settings.output_dir)  # a run to resume (or to predict with)
  with loop.bad_input_as_training_error():
    tokenizer, vocab_md5 = common.run_tokenizer(config, settings, existing)
    processor = make_processor(settings)
    start = _label_list(processor, settings)
    label_list = start.labels
    if isinstance(processor, classifier_data.GenericProcessor):
      # The files are read (and their labels checked) with the labels in the model's order.
      processor = make_processor(dataclasses.replace(
          settings, label_list=tuple(label_list or ()), regression=label_list is None))
    data = _read_data(processor, settings)
    _check_outputs(processor, settings)
  regression = label_list is None
  info = dict(task_name=settings.task_name.lower(), labels=label_list, regression=regression,
              pair=data["pair"], do_lower_case=bool(settings.do_lower_case), vocab_md5=vocab_md5,
              max_seq_length=settings.max_seq_length, head=common.CLASSIFIER_HEAD)
  common.note_training_data(settings, info, [_train_file(processor, settings)])
  with common.OutputDirRun(config, settings, strategy, chief, "run_classifier") as record_dir:
    with loop.dtype_policy(settings.mixed_precision):
      return _run(config, settings, strategy, chief, data, label_list, tokenizer, info,
                  record_dir, start.fresh_head)


def _data_file(processor, settings: ClassifierSettings, split: str) -> str:
  """The file of a split ("train", "dev", "test") a run reads: the generic task's --train_file
  (--dev_file, --test_file) in data_dir or as a path, else data_dir's <split>.tsv (the GLUE
  processors' names)."""
  name = f"{split}.tsv"
  if isinstance(processor, classifier_data.GenericProcessor):
    name = processor.files[split]
    if name.startswith("/") or "://" in name:
      return name
  return io.join(settings.data_dir, name)


def _train_file(processor, settings: ClassifierSettings) -> str:
  return _data_file(processor, settings, "train")


def _check_outputs(processor, settings: ClassifierSettings) -> None:
  """Refuses an output of the run that is one of its input files (common)."""
  names = [f"{kind}{suffix}{ext}" for suffix in ("", MISMATCHED) for kind, ext in (
      ("train", ".tf_record"), ("eval", ".tf_record"), ("predict", ".tf_record"),
      ("eval_results", ".txt"), ("test_results", ".tsv"), ("test_predictions", ".tsv"))]
  inputs = {f"--{split}_file": _data_file(processor, settings, split)
            for split in ("train", "dev", "test")}
  common.check_outputs_not_inputs(common.run_outputs(settings.output_dir, names),
                                  dict(inputs, **{"--vocab_file": settings.vocab_file}))


def _read_data(processor, settings: ClassifierSettings) -> Dict[str, Any]:
  """Every example the run needs, read before anything is written."""
  data: Dict[str, Any] = {"train": None, "dev": [], "test": []}
  if settings.do_train:
    data["train"] = processor.get_train_examples(settings.data_dir)
    if not data["train"]:
      raise loop.TrainingError(f"the {settings.task_name} training set in {settings.data_dir} "
                               "has no example")
  if settings.do_eval:
    data["dev"] = _evaluation_sets(processor, settings.data_dir, "dev")
  if settings.do_predict:
    data["test"] = _evaluation_sets(processor, settings.data_dir, "test")
  for split in ("dev", "test"):
    for suffix, examples in data[split]:
      if not examples:
        raise loop.TrainingError(f"the {settings.task_name} {split}{suffix} set in "
                                 f"{settings.data_dir} has no example")
  every = list(data["train"] or []) + [e for _, ex in data["dev"] + data["test"] for e in ex]
  data["pair"] = _is_pair_task(every)
  return data


def num_train_steps(num_examples: int, train_batch_size: int, num_train_epochs: float) -> int:
  """The original's int(len(train_examples) / train_batch_size * num_train_epochs)."""
  return int(num_examples / train_batch_size * num_train_epochs)


def _write_records(examples, label_list, settings, tokenizer, path, batch_size=None) -> int:
  examples = list(examples)
  if batch_size is not None and settings.use_tpu:
    classifier_data.pad_for_tpu(examples, batch_size)
  return classifier_data.file_based_convert_examples_to_features(
      examples, label_list, settings.max_seq_length, tokenizer, path)


def _run(config, settings, strategy, chief, data, label_list, tokenizer, info, record_dir,
         fresh_head=None):
  regression = label_list is None
  task = classifier.REGRESSION_TASK if regression else classifier.TASK
  result: Dict[str, Any] = {"label_list": label_list}
  steps = 0
  if settings.do_train:
    train_examples = data["train"]
    steps = num_train_steps(len(train_examples), settings.train_batch_size,
                            settings.num_train_epochs)
    if steps <= 0:
      raise loop.TrainingError(
          f"{len(train_examples)} training examples / --train_batch_size="
          f"{settings.train_batch_size} x --num_train_epochs={settings.num_train_epochs} is "
          "less than one step; lower the batch size or train more epochs")
    warmup = int(steps * settings.warmup_proportion)
    train_file = io.join(record_dir, "train.tf_record")
    _write_records(train_examples, label_list, settings, tokenizer, train_file)
    result["num_train_steps"] = steps
    logging.info("***** Running training *****")
    logging.info("  Num examples = %d", len(train_examples))
    logging.info("  Batch size = %d", settings.train_batch_size)
    logging.info("  Num steps = %d (warmup %d)", steps, warmup)

  run = loop.prepare_run(
      strategy, lambda: heads.build_classifier_model(config, None if regression
                                                     else len(label_list)),
      task, settings, max(steps, 1), int(steps * settings.warmup_proportion), chief)
  model, global_step, trainer = run.model, run.global_step, run.trainer
  loop.init_fine_tuning(
      run, settings, heads.CLASSIFIER_LAYER, "classifier head (output_weights/output_bias)",
      "evaluating or predicting it would give random results (google-research/bert#1037). Add "
      "--do_train, or point --init_checkpoint at a fine-tuned classifier",
      fresh_head=fresh_head)
  common.record_run_info(config, settings, chief, info)
  if settings.do_train:
    result.update(loop.fine_tune(
        run, settings, lambda batch, ctx: input_pipeline.classifier_dataset(
            io.join(record_dir, "train.tf_record"), settings.max_seq_length, batch,
            is_training=True, input_context=ctx, regression=regression, seed=settings.seed,
            shuffle_buffer_size=settings.shuffle_buffer_size,
            length_buckets=settings.buckets(settings.max_seq_length),
            group_by_length=settings.group_by_length,
            batches_per_update=settings.gradient_accumulation_steps), steps, chief))
  result["global_step"] = int(global_step.numpy())
  result["model"] = model

  for suffix, examples in data["dev"]:
    results = _evaluate(trainer, settings, examples, label_list, tokenizer, record_dir,
                        suffix, result["global_step"], chief)
    if suffix:
      result[suffix.strip("_")] = results
    else:
      result.update(results)
  for suffix, examples in data["test"]:
    result[f"test_results{suffix}"] = _predict(trainer, settings, examples, label_list,
                                               tokenizer, record_dir, suffix, chief)
  if settings.do_train and settings.export and chief:
    result["export_dir"] = common.export_once(
        settings, EXPORT_MODEL_NAME, result["global_step"],
        lambda: export_classifier(model, config, settings, info, version=result["global_step"]))
  if not chief:
    io.remove(record_dir)
  return result


def _distributed_eval_iterator(strategy, path, settings, batch_size, num_examples, regression):
  def dataset_fn(ctx):
    return input_pipeline.classifier_dataset(
        path, settings.max_seq_length, batch_size, is_training=False, input_context=ctx,
        regression=regression, num_examples=num_examples,
        length_buckets=settings.buckets(settings.max_seq_length))
  return iter(strategy.distribute_datasets_from_function(dataset_fn))


def _predictions(trainer, settings, examples, label_list, tokenizer, record_dir, name,
                 batch_size):
  """(logits [N, C] of the real examples in order, label_ids [N]) from the written records."""
  regression = label_list is None
  path = io.join(record_dir, f"{name}.tf_record")
  count = _write_records(examples, label_list, settings, tokenizer, path, batch_size)
  num_steps = input_pipeline.eval_steps(count, batch_size)
  logging.info("  Num examples = %d (%d actual, %d padding)", count, len(examples),
               count - len(examples))
  logging.info("  Batch size = %d, %d batches", batch_size, num_steps)
  iterator = _distributed_eval_iterator(trainer.strategy, path, settings, batch_size, count,
                                        regression)
  out = loop.predict(trainer, iterator, num_steps,
                     keep=("label_ids", "is_real_example"))
  real = out["is_real_example"] > 0
  if int(real.sum()) != len(examples):
    raise loop.TrainingError(f"{path}: {int(real.sum())} real examples predicted, "
                             f"expected {len(examples)}")
  return out["logits"][real].astype(np.float32), out["label_ids"][real]


def _evaluate(trainer, settings, examples, label_list, tokenizer, record_dir, suffix, step,
              chief) -> Dict[str, float]:
  logging.info("***** Running evaluation%s *****", suffix.replace("_", " "))
  logits, labels = _predictions(trainer, settings, examples, label_list, tokenizer, record_dir,
                                f"eval{suffix}", settings.eval_batch_size)
  results = classifier.results_from_predictions(logits, labels, settings.eval_batch_size,
                                                regression=label_list is None)
  results["global_step"] = step
  logging.info("***** Eval results%s *****", suffix.replace("_", " "))
  for key in sorted(results):
    logging.info("  %s = %s", key, results[key])
  if chief:
    loop.write_eval_results(io.join(settings.output_dir, f"eval_results{suffix}.txt"),
                            results)
  return results


def probabilities(logits: np.ndarray) -> np.ndarray:
  """Softmax over the last axis in float32 (the original's tf.nn.softmax output)."""
  logits = logits.astype(np.float32)
  shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
  return (shifted / shifted.sum(axis=-1, keepdims=True)).astype(np.float32)


def _predict(trainer, settings, examples, label_list, tokenizer, record_dir, suffix, chief):
  logging.info("***** Running prediction%s *****", suffix.replace("_", " "))
  logits, _ = _predictions(trainer, settings, examples, label_list, tokenizer, record_dir,
                           f"predict{suffix}", settings.predict_batch_size)
  path = io.join(settings.output_dir, f"test_results{suffix}.tsv")
  if not chief:
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


# === Export ===


def export_classifier(model: keras.Model, config: BertConfig, settings: ClassifierSettings,
                      info: Mapping[str, Any], version: Optional[int] = None,
                      export_dir: Optional[str] = None) -> str:
  """Exports the raw-text classifier to <output_dir>/export/classifier/<version>/."""
  labels = info["labels"]
  float_model = checkpoints.float32_copy(model, lambda: heads.build_classifier_model(
      config, None if labels is None else len(labels)))
  path = tf_serving.export_classifier_model(
      float_model, config, settings.vocab_file,
      export_dir or io.join(settings.output_dir, EXPORT_DIR), labels, info["pair"],
      do_lower_case=settings.do_lower_case, seq_length=settings.max_seq_length,
      version=version, model_name=EXPORT_MODEL_NAME, task_info=info,
      length_buckets=settings.length_buckets)
  logging.info("Exported the classifier for TF Serving to %s", path)
  return path


# === Several seeds, and the paper's sweep ===


def primary_metric(task_name: str, regression: bool) -> str:
  """The metric runs are ranked by: the GLUE metric of the task, else accuracy."""
  name = task_name.lower()
  if name in PRIMARY_METRICS:
    return PRIMARY_METRICS[name]
  return "eval_pearson" if regression else "eval_accuracy"


def summarize(runs: Sequence[Mapping[str, float]]) -> Dict[str, Tuple[float, float]]:
  """{metric: (mean, sample standard deviation)} over runs (std 0 for one run)."""
  keys = [k for k in runs[0] if k != "global_step" and all(k in r for r in runs)]
  summary = {}
  for key in keys:
    values = np.array([float(r[key]) for r in runs], np.float64)
    std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
    summary[key] = (float(values.mean()), std)
  return summary


def _scalar_results(result: Mapping[str, Any]) -> Dict[str, float]:
  return {k: float(v) for k, v in result.items()
          if k.startswith("eval_") or k in ("loss", "global_step")}


def run_seeds(config: BertConfig, settings: ClassifierSettings, seeds: Sequence[int],
              strategy=None, runner: Optional[Callable[..., Dict[str, Any]]] = None
              ) -> Dict[str, Any]:
  """The same run once per seed in <output_dir>/seed_<s>, and mean ± std of every metric.

  Writes <output_dir>/seeds_summary.txt (`metric = mean +- std`, one line per metric, and the
  per-seed values). Returns {"runs": {seed: eval results}, "summary": {metric: (mean, std)}}.
  """
  if not seeds:
    raise loop.TrainingError("--seeds is empty")
  if not settings.do_eval:
    raise loop.TrainingError("--seeds compares dev results: add --do_eval")
  _refuse_repeats("--seeds", seeds)
  runner = runner or run_classifier
  runs = {}
  for seed in seeds:
    run_settings = dataclasses.replace(
        settings, seed=seed, output_dir=io.join(settings.output_dir, f"seed_{seed}"))
    logging.info("***** Seed %d (%d of %d) *****", seed, len(runs) + 1, len(seeds))
    runs[seed] = _run_point(config, run_settings, strategy, runner)
  summary = summarize(list(runs.values()))
  lines = [f"{key} = {mean:.6f} +- {std:.6f}\n" for key, (mean, std) in sorted(summary.items())]
  lines.append(f"seeds = {','.join(map(str, seeds))}\n")
  for seed, results in runs.items():
    lines.append(f"seed_{seed}: " + " ".join(f"{k}={v:.6f}" for k, v in sorted(results.items()))
                 + "\n")
  io.makedirs(settings.output_dir)
  io.write_text(io.join(settings.output_dir, "seeds_summary.txt"), "".join(lines))
  for line in lines:
    logging.info("%s", line.rstrip())
  return {"runs": runs, "summary": summary}


# Written in each seed's or sweep point's folder when it finishes: a rerun of the --seeds or
# --sweep command takes its results from there instead of running it again.
POINT_RESULTS_FILE = "point_results.json"


def _refuse_repeats(flag: str, values: Sequence[Any]) -> None:
  repeated = sorted({str(v) for v in values if list(values).count(v) > 1})
  if repeated:
    raise loop.TrainingError(f"{flag} repeats {', '.join(repeated)}: each run needs its own "
                             "folder; give each value once")


def _point_settings(settings: ClassifierSettings) -> Dict[str, Any]:
  return json.loads(json.dumps(dataclasses.asdict(settings), default=str))


def _run_point(config, settings: ClassifierSettings, strategy, runner) -> Dict[str, float]:
  """One seed or sweep point in settings.output_dir: its eval results, from its
  POINT_RESULTS_FILE when it finished earlier with the same settings (an interrupted --seeds
  or --sweep resumes at its first unfinished point), else from running it (an interrupted
  point resumes from its checkpoints)."""
  path = io.join(settings.output_dir, POINT_RESULTS_FILE)
  wanted = _point_settings(settings)
  if io.exists(path):
    done = json.loads(io.read_text(path))
    if done.get("settings") == wanted:
      logging.info("%s finished earlier: its results are read from %s", settings.output_dir,
                   path)
      return {k: float(v) for k, v in done["results"].items()}
    logging.info("%s finished earlier with other settings: run again", settings.output_dir)
  results = _scalar_results(runner(config, settings, strategy))
  if strategy is None or loop.is_chief(strategy):
    io.makedirs(settings.output_dir)
    io.write_text(path, json.dumps(dict(settings=wanted, results=results), indent=2,
                                   sort_keys=True) + "\n")
  return results


def sweep_grid(learning_rates: Sequence[float], epochs: Sequence[float],
               batch_sizes: Sequence[int]) -> List[Tuple[float, float, int]]:
  return [(lr, ep, bs) for bs in batch_sizes for lr in learning_rates for ep in epochs]


def _grid_name(lr: float, epochs: float, batch: int) -> str:
  return f"lr{lr:g}_ep{epochs:g}_bs{batch}"


def run_sweep(config: BertConfig, settings: ClassifierSettings,
              learning_rates: Sequence[float] = (5e-5, 3e-5, 2e-5),
              epochs: Sequence[float] = (2.0, 3.0, 4.0), batch_sizes: Sequence[int] = (16, 32),
              seeds: Sequence[int] = (), strategy=None, keep_all_checkpoints: bool = False,
              runner: Optional[Callable[..., Dict[str, Any]]] = None) -> Dict[str, Any]:
  """The paper's fine-tuning grid: one run (or one per seed) per learning rate x epochs x batch
  in <output_dir>/<lr..._ep..._bs...>, ranked by the task's primary dev metric (the mean over
  seeds). The best run keeps its checkpoints and export, the others keep their results only
  (unless keep_all_checkpoints). Writes <output_dir>/sweep_summary.tsv and best_run.txt.
  """
  if not settings.do_train or not settings.do_eval:
    raise loop.TrainingError("--sweep trains and compares dev results: it needs --do_train "
                             "and --do_eval")
  grid = sweep_grid(learning_rates, epochs, batch_sizes)
  if not grid:
    raise loop.TrainingError("the sweep grid is empty")
  for flag, values in (("--sweep_learning_rates", learning_rates),
                       ("--sweep_epochs", epochs), ("--sweep_batch_sizes", batch_sizes),
                       ("--seeds", seeds)):
    _refuse_repeats(flag, values)
  rows = []
  for i, (lr, ep, bs) in enumerate(grid):
    name = _grid_name(lr, ep, bs)
    point = dataclasses.replace(settings, learning_rate=lr, num_train_epochs=ep,
                                train_batch_size=bs,
                                output_dir=io.join(settings.output_dir, name))
    logging.info("***** Sweep point %d of %d: %s *****", i + 1, len(grid), name)
    if seeds:
      summary = run_seeds(config, point, seeds, strategy, runner)["summary"]
      means = {k: mean for k, (mean, _) in summary.items()}
      stds = {k: std for k, (_, std) in summary.items()}
    else:
      means, stds = _run_point(config, point, strategy, runner or run_classifier), {}
    rows.append(dict(name=name, learning_rate=lr, num_train_epochs=ep, train_batch_size=bs,
                     means=means, stds=stds))
  labels_regression = "eval_pearson" in rows[0]["means"]
  metric = primary_metric(settings.task_name, labels_regression)
  if metric not in rows[0]["means"]:
    metric = "eval_accuracy"
  best = max(rows, key=lambda r: r["means"].get(metric, -math.inf))
  keys = sorted(rows[0]["means"])
  lines = ["\t".join(["run", "learning_rate", "num_train_epochs", "train_batch_size"] + keys)
           + "\n"]
  for row in rows:
    cells = [row["name"], f"{row['learning_rate']:g}", f"{row['num_train_epochs']:g}",
             str(row["train_batch_size"])]
    for key in keys:
      cell = f"{row['means'][key]:.6f}"
      if key in row["stds"] and seeds and len(seeds) > 1:
        cell += f" +- {row['stds'][key]:.6f}"
      cells.append(cell)
    lines.append("\t".join(cells) + "\n")
  io.write_text(io.join(settings.output_dir, "sweep_summary.tsv"), "".join(lines))
  best_dir = io.join(settings.output_dir, best["name"])
  io.write_text(io.join(settings.output_dir, "best_run.txt"),
                f"{best_dir}\n{metric} = {best['means'][metric]:.6f}\n")
  logging.info("Best of %d sweep points by %s: %s (%.4f)", len(rows), metric, best["name"],
               best["means"][metric])
  if not keep_all_checkpoints:
    for row in rows:
      if row is not best:
        _drop_checkpoints(io.join(settings.output_dir, row["name"]))
  return {"rows": rows, "best": best, "best_dir": best_dir, "metric": metric}


def _drop_checkpoints(run_dir: str) -> None:
  """Removes the checkpoints, the export and the records of a run (its results stay)."""
  for name in io.listdir(run_dir):
    name = name.rstrip("/")
    if name.startswith(("ckpt-", "checkpoint")) or name.endswith(".tf_record") or \
        name == EXPORT_DIR:
      io.remove(io.join(run_dir, name))
