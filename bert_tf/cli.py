"""The command-line convention shared by every bert_tf tool.

Each tool (`python -m bert_tf.run_pretraining`, `python data_prep/create_pretraining_data.py`,
...) is a thin module with three parts:

  define_flags(flag_values)  defines its flags; called only under `__main__` (or by tests on a
                             fresh FlagValues), so any number of tools import into one process.
  main(argv)                 turns flags into a settings dataclass (`settings_from_flags`) and
                             calls the library.
  cli.run(main, define_flags, "name") under `if __name__ == "__main__":`.

Flags used by several tools (model, vocab, casing, init checkpoint, sequence length, batch
sizes, learning rate, warmup, strategy, TPU, precision, XLA, seed) are defined here once, with
the original's names; a tool passes its own defaults.

Exit status: 0 on success (and for --help), 1 on a failure, printed as one line
`<tool>: error: <message>` naming the file or flag, 2 on a usage error (an unknown or
malformed flag, a missing required flag, flags that contradict each other), 75 when the run is
restartable: SIGTERM stopped training after it saved a checkpoint of the step reached (the
library raises stopping.Preempted, a SystemExit with this status: running the same command again
resumes), or another worker of a multi-worker run was lost during training (stopping.WorkerLost,
after one line naming it: relaunching every worker resumes from the last checkpoint; the
process ends at once, see _exit_at_once); 143 when SIGTERM stopped a fine-tuning run outside
its training steps (after one line; what the run wrote before its first checkpoint is removed).
Set BERT_TF_TRACEBACK=1 to see the traceback of a failure.

Logs: a tool's own lines show, TensorFlow's routine ones do not (bert_tf/logs.py);
--verbosity=1 (-v 1) or BERT_TF_VERBOSE=1 shows everything. Kernels: a tool runs TensorFlow's
oneDNN CPU kernels on x86-64 unless TF_ENABLE_ONEDNN_OPTS is set (choose_cpu_kernels).
"""

import dataclasses
import os
import re
import sys
from typing import Any, Callable, Iterable, Optional, Sequence, Tuple, Type, TypeVar

from absl import app
from absl import flags
from absl import logging

from bert_tf import logs
from bert_tf.training import errors

FLAGS = flags.FLAGS
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_PREEMPTED = 75  # = bert_tf.training.stopping.EXIT_PREEMPTED (a test checks)
EXIT_TERMINATED = 128 + 15  # a SIGTERM outside training, as a shell reports one

STRATEGY_NAMES = ("tpu", "mirrored", "multi_worker_mirrored", "one_device")
PRECISION_NAMES = ("none", "bfloat16", "float16")

T = TypeVar("T")


class UsageError(ValueError):
  """Flags that are missing or contradict each other; the message names the flags (exit 2)."""


# === Shared flags ===


# --do_lower_case of the fine-tuning commands, which default it from the model they start from.
RECORDED_CASING_HELP = ("; default: what the model the run starts from records (a resumed "
                        "--output_dir, else --init_checkpoint: task_info.json, "
                        "data_metadata.json, tokenizer_config.json or the original's release "
                        "name), else True.")


def define_model_flags(flag_values=FLAGS, *, do_lower_case: Optional[bool] = True,
                       max_seq_length: int = 128, vocab_help: str = "The WordPiece vocab "
                       "the model was trained on (one token per line).",
                       init_checkpoint_help: Optional[str] = None,
                       do_lower_case_help: Optional[str] = None) -> None:
  """bert_config_file, vocab_file, do_lower_case, init_checkpoint, max_seq_length."""
  flags.DEFINE_string("bert_config_file", None,
                      "The config json file of the BERT model (the original's "
                      "bert_config.json).", flag_values=flag_values)
  flags.DEFINE_string("vocab_file", None, vocab_help, flag_values=flag_values)
  flags.DEFINE_bool("do_lower_case", do_lower_case,
                    "Lower-case the input and strip accents (True for uncased models)"
                    + (do_lower_case_help or ("; if given, checked against the data's metadata."
                                              if do_lower_case is None else ".")),
                    flag_values=flag_values)
  flags.DEFINE_string("init_checkpoint", None, init_checkpoint_help or (
      "Initial weights: one of our checkpoints (file prefix or run directory), an original "
      "TF1 checkpoint, a Model Garden checkpoint, Hugging Face .safetensors or a .keras "
      "model."), flag_values=flag_values)
  flags.DEFINE_integer("max_seq_length", max_seq_length,
                       "Maximum total input length in WordPiece tokens (longer inputs are "
                       "truncated, shorter ones padded).", flag_values=flag_values)


def define_batch_flags(flag_values=FLAGS, *, train_batch_size: int = 32,
                       eval_batch_size: int = 8, predict_batch_size: Optional[int] = None,
                       learning_rate: float = 5e-5) -> None:
  """train/eval(/predict) batch sizes and the peak learning rate."""
  flags.DEFINE_integer("train_batch_size", train_batch_size,
                       "Global examples per optimizer update (split over replicas and "
                       "accumulation micro-batches).", flag_values=flag_values)
  flags.DEFINE_integer("eval_batch_size", eval_batch_size, "Global batch size for eval.",
                       flag_values=flag_values)
  if predict_batch_size is not None:
    flags.DEFINE_integer("predict_batch_size", predict_batch_size,
                         "Global batch size for prediction.", flag_values=flag_values)
  flags.DEFINE_float("learning_rate", learning_rate, "The peak learning rate (Adam).",
                     flag_values=flag_values)


def define_tpu_flags(flag_values=FLAGS) -> None:
  """The original's TPU flags: use_tpu, tpu_name, tpu_zone, gcp_project, master, num_tpu_cores."""
  flags.DEFINE_bool("use_tpu", False, "Whether to use a TPU (same as --strategy=tpu).",
                    flag_values=flag_values)
  flags.DEFINE_string("tpu_name", None, "The Cloud TPU to use (name or grpc:// address).",
                      flag_values=flag_values)
  flags.DEFINE_string("tpu_zone", None, "GCE zone of the Cloud TPU.", flag_values=flag_values)
  flags.DEFINE_string("gcp_project", None, "Project of the Cloud TPU.", flag_values=flag_values)
  flags.DEFINE_string("master", None, "TPU address, used when --tpu_name is not given.",
                      flag_values=flag_values)
  flags.DEFINE_integer("num_tpu_cores", 8, "TPU cores (informational: all cores are used).",
                       flag_values=flag_values)


def define_device_flags(flag_values=FLAGS, *, what: str = "the training step") -> None:
  """strategy, mixed_precision, jit_compile: where and how a model runs (training or not)."""
  flags.DEFINE_enum("strategy", None, list(STRATEGY_NAMES),
                    "tf.distribute strategy. Default: tpu with --use_tpu, "
                    "multi_worker_mirrored when TF_CONFIG names several workers, mirrored with "
                    "several GPUs, else one_device.", flag_values=flag_values)
  flags.DEFINE_enum("mixed_precision", "none", list(PRECISION_NAMES),
                    "Compute dtype; float16 uses dynamic loss scaling.", flag_values=flag_values)
  flags.DEFINE_bool("jit_compile", False, f"Compile {what} with XLA.", flag_values=flag_values)


def define_runtime_flags(flag_values=FLAGS) -> None:
  """The device flags, gradient_accumulation_steps, seed, determinism."""
  define_device_flags(flag_values)
  flags.DEFINE_integer("gradient_accumulation_steps", 1,
                       "Micro-batches per update: train_batch_size is split into this many, "
                       "their gradients summed in-graph and clipped once.",
                       flag_values=flag_values)
  flags.DEFINE_integer("seed", None,
                       "Seeds weight init and the data order (a resumed run then sees exactly "
                       "the batches of an uninterrupted one).", flag_values=flag_values)
  flags.DEFINE_bool("deterministic_ops", False,
                    "tf.config.experimental.enable_op_determinism (bitwise repeatable runs, "
                    "slower).", flag_values=flag_values)


def define_fine_tuning_flags(flag_values=FLAGS, *, export_help: str) -> None:
  """The run flags of every fine-tuning command: num_train_epochs, warmup_proportion,
  save_checkpoints_steps, iterations_per_loop, the TPU and runtime flags, optimizer,
  keep_checkpoint_max, export and allow_tokenizer_mismatch."""
  fv = dict(flag_values=flag_values)
  flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.",
                     **fv)
  flags.DEFINE_float("warmup_proportion", 0.1,
                     "Proportion of training with linear learning rate warmup.", **fv)
  flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save a checkpoint.", **fv)
  flags.DEFINE_integer("iterations_per_loop", 1000,
                       "Steps per tf.function call (and between log lines).", **fv)
  define_tpu_flags(flag_values)
  define_runtime_flags(flag_values)
  flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"],
                    "adamw: the original AdamWeightDecay; lamb: LAMB.", **fv)
  define_bias_correction_flag(flag_values)
  flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept in output_dir.", **fv)
  flags.DEFINE_bool("export", True, export_help, **fv)
  define_serving_flags(flag_values)
  flags.DEFINE_bool("allow_tokenizer_mismatch", False,
                    "Go on (with a warning) when --vocab_file or --do_lower_case contradicts "
                    "what the checkpoint was trained with.", **fv)
  define_length_flags(flag_values, grouping=True)
  define_distillation_flags(flag_values)


def define_distillation_flags(flag_values=FLAGS) -> None:
  """Distillation from a fine-tuned teacher (--teacher, --distill_alpha,
  --distill_temperature) and the layers a shallower model takes from a deeper
  --init_checkpoint (--init_layers)."""
  from bert_tf.training import distillation  # pylint: disable=g-import-not-at-top
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string(
      "teacher", None, "Distil from this teacher: a model fine-tuned on the same task (a run's "
      "output_dir, or any checkpoint the converters read, with its head and its "
      "task_info.json or config.json). The run's model (the student) learns from a mix of the "
      "labels and the teacher's soft targets; the teacher runs frozen in the training step. "
      "Its vocab, casing, labels (and their order), head and max_seq_length must be the "
      "run's; its dev results are computed first (output_dir/teacher/, and teacher_* in the "
      "results).", **fv)
  flags.DEFINE_float(
      "distill_alpha", distillation.DEFAULT_ALPHA, "With --teacher: the weight of the task's own "
      "(hard-label) loss; the teacher's soft loss weighs 1 - alpha (0: soft targets only: "
      "best measured with transfer data, worst without).", **fv)
  flags.DEFINE_float(
      "distill_temperature", distillation.DEFAULT_TEMPERATURE, "With --teacher: the softmax "
      "temperature T of the soft targets; the soft loss is scaled by T^2 (a regression "
      "head's soft loss is the squared error to the teacher's score, without T). Measured "
      "without transfer data, 1 did better than 2 on one task and worse on another; with "
      "transfer data they tied (benchmarks/README.md, Distillation).", **fv)
  flags.DEFINE_bool(
      "cache_teacher", False, "With --teacher: compute the teacher's outputs on the training "
      "records once, before the first step, and write them into the records as float32 "
      "(run_classifier: its logits; run_ner: its logits at each window's real positions; "
      "run_squad: its start and end logits at every position), stamped in teacher_cache.json "
      "(a cache stamped for another teacher, vocab, max_seq_length, labels or head is "
      "refused), instead of running the teacher in every step.", **fv)
  define_intermediate_flags(flag_values)
  flags.DEFINE_string(
      "init_layers", "even", "Which encoder layers of an --init_checkpoint deeper than the "
      "model it takes: even (evenly spaced from the first to the last, as DistilBERT: 6 of 12 "
      "are 0,2,4,7,9,11), first (the first ones), or the checkpoint's layer numbers from 0 "
      "(e.g. 0,3,5). Logged.", **fv)


def define_intermediate_flags(flag_values=FLAGS) -> None:
  """Distillation losses inside the encoder, with --teacher (each off at weight 0): hidden
  states through a learned projection with a layer map, and MiniLM's last-layer attention and
  value relation (training/distillation/features.py)."""
  from bert_tf.training import distillation  # pylint: disable=g-import-not-at-top
  fv = dict(flag_values=flag_values)
  flags.DEFINE_float(
      "distill_hidden_weight", 0.0, "With --teacher: the weight of the mean squared error "
      "between the student's hidden states (through a learned projection when the widths "
      "differ, trained with the student and never exported) and the teacher's, layer pairs "
      "from --distill_layer_map, averaged over real positions. 0: off.", **fv)
  flags.DEFINE_string(
      "distill_layer_map", distillation.DEFAULT_LAYER_MAP, "With --distill_hidden_weight > 0: "
      "which student layer learns which teacher layer, from 1: uniform (student layer i to "
      "teacher layer round(i x teacher layers / student layers)), last (last to last), or "
      "pairs student:teacher such as 1:2,2:4,3:6.", **fv)
  flags.DEFINE_float(
      "distill_attention_weight", 0.0, "With --teacher: the weight of MiniLM's attention "
      "transfer, the KL divergence of the last layer's self-attention distributions (teacher "
      "to student) per head, averaged over real positions. 0: off.", **fv)
  flags.DEFINE_float(
      "distill_value_weight", 0.0, "With --teacher: the weight of MiniLM's value relation, "
      "the KL divergence of the last layer's softmax(V V^T / sqrt(d)) per head, averaged over "
      "real positions. 0: off.", **fv)
  flags.DEFINE_integer(
      "distill_relation_heads", None, "The heads the attention and value losses split the "
      "last layer's query, key and value into; it must divide both models' hidden sizes. "
      "Default: the student's num_attention_heads (each model's own attention heads when the "
      "teacher has as many).", **fv)


def define_serving_flags(flag_values=FLAGS) -> None:
  """How an export's raw-text signatures run the model: every command that exports."""
  fv = dict(flag_values=flag_values)
  flags.DEFINE_enum("serving_precision", "float32", ["float32", "bfloat16"],
                    "The matmuls' dtype in the exported raw-text signatures: float32, or "
                    "bfloat16 for servers whose CPU has bfloat16 matrix units (AMX, AVX-512 "
                    "BF16) or a GPU/TPU (the residual stream, LayerNorm and softmax stay "
                    "float32).", **fv)
  flags.DEFINE_bool("pack_requests", True,
                    "The exported signatures pack a batch's texts several to a row (attention "
                    "kept within each text; each answer as if alone). --nopack_requests: one "
                    "text per row.", **fv)


def serving_exporter(exporter, flag_values=FLAGS):
  """`exporter` (a model.exporting.Exporter) writing its SavedModels as --serving_precision and
  --pack_requests say (serving.modules.inference_options around its export)."""
  from bert_tf.model import exporting  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import modules  # pylint: disable=g-import-not-at-top
  options = modules.InferenceOptions(flag_values.serving_precision, flag_values.pack_requests)

  def export(*args, **kwargs):
    with modules.inference_options(options):
      return exporter.export(*args, **kwargs)

  return exporting.Exporter(exporter.model_name, export)


def define_bias_correction_flag(flag_values=FLAGS) -> None:
  """adam_bias_correction: every command that trains."""
  flags.DEFINE_bool(
      "adam_bias_correction", False,
      "Adam's bias correction in --optimizer=adamw (the original has none; Model Garden's, "
      "Keras' and torch's AdamW have it). Without it the early steps are larger at the same "
      "--learning_rate: 6.5x at step 10, 3.2x at step 100, 1.26x at step 1,000. Set it to use "
      "a learning rate tuned in those frameworks, and to pretrain from scratch with a warmup "
      "shorter than about a thousand steps, where the original's larger early steps can keep "
      "the model on the commonest token (README: Learning rates across frameworks). LAMB "
      "always corrects.",
      flag_values=flag_values)


def define_length_flags(flag_values=FLAGS, *, grouping: bool = False) -> None:
  """length_buckets (every command that runs a model on records or text) and, for training,
  group_by_length."""
  from bert_tf import length_buckets  # pylint: disable=g-import-not-at-top
  flags.DEFINE_string("length_buckets", length_buckets.AUTO, length_buckets.FLAG_HELP,
                      flag_values=flag_values)
  if grouping:
    flags.DEFINE_bool("group_by_length", False,
                      "Training batches hold examples of one length bucket (a window of 50 "
                      "updates drawn from the shuffled file, ordered by bucket, random within "
                      "a bucket; the updates then shuffled): far less padding to compute "
                      "(short sentences: about 1.5x faster), but batches less varied, which "
                      "cost 0.03-0.07 dev accuracy in 45-step MiniLM runs on a pair task. Each "
                      "epoch still holds every example once; seeded and resumable like the "
                      "plain shuffle. Needs length buckets (ignored with --length_buckets=none).",
                      flag_values=flag_values)
    define_packing_flag(flag_values, default="auto")


def define_packing_flag(flag_values=FLAGS, default: str = "none",
                        pretraining: bool = False) -> None:
  """packing: several examples per row (bert_tf.row_packing)."""
  if pretraining:
    modes = ("auto: none (the original's data fills most instances to --max_seq_length, where "
             "packing saves little; choose exact or static for corpora of short documents).")
  else:
    modes = ("auto: exact for classification, tagging and multiple choice when packed rows "
             "would compute at most 90% of the positions of the unpacked batches (estimated "
             "from the training records, logged), none otherwise and for SQuAD, and with "
             "--use_tpu, --jit_compile or --group_by_length. Packed rows narrow to a "
             "--length_buckets width when that adds no row; exact and static not with "
             "--group_by_length.")
  flags.DEFINE_enum(
      "packing", default, ["none", "exact", "static", "auto"],
      "Several examples per row of --max_seq_length, kept apart (attention within an example, "
      "positions restarting, each its own [CLS]), so little of what is computed is padding. "
      "none: one example per row. exact: every step holds the --train_batch_size examples "
      "of the unpacked run, packed into the fewest rows (the same optimisation; eval and "
      "predict batches packed too, with the same results). static: a fixed number of rows "
      "per step, about --train_batch_size examples on average (one shape for TPUs and "
      "--jit_compile; the loss is the mean over the step's examples). " + modes,
      flag_values=flag_values)


def define_seeds_flag(flag_values=FLAGS) -> None:
  """seeds: the same fine-tuning once per seed, and the mean +- std of its dev results."""
  flags.DEFINE_list("seeds", [], "Run once per seed (in output_dir/seed_<s>) and write the "
                    "mean +- std of every metric to output_dir/seeds_summary.txt (needs "
                    "--do_eval; not with --seed).", flag_values=flag_values)


def number_list(name: str, values: Sequence[str], kind: Callable[[str], Any],
                positive: bool = False) -> list:
  """The numbers of list flag --name (each above 0 if `positive`), or a UsageError naming
  the flag."""
  try:
    numbers = [kind(v) for v in values]
  except ValueError:
    raise UsageError(f"--{name}: expected a list of numbers, got {','.join(values)}") from None
  if positive and not all(number > 0 for number in numbers):
    raise UsageError(f"--{name}: every value must be above 0, got {','.join(values)}")
  return numbers


def seeds_from_flags(flag_values=FLAGS) -> list:
  """--seeds as ints, refused beside --seed."""
  f = flag_values
  if f.seeds and f.seed is not None:
    raise UsageError("--seed and --seeds contradict each other; give one")
  return number_list("seeds", f.seeds, int)


def define_text_input_flags(flag_values=FLAGS, *,
                            overwrite_help: str = "Replace an existing output.") -> None:
  """input_file, errors and overwrite: the plain-text input flags of the data_prep tools."""
  from bert_tf.data import corpus  # pylint: disable=g-import-not-at-top
  flags.DEFINE_string("input_file", None,
                      "Input text files (one sentence per line, blank lines between documents): "
                      "comma-separated paths and globs.", flag_values=flag_values)
  flags.DEFINE_enum("errors", "strict", list(corpus.ERRORS_MODES),
                    "Lines that are not valid UTF-8: strict = stop with the file and line, "
                    "replace = decode with U+FFFD, skip = drop the line (both counted).",
                    flag_values=flag_values)
  flags.DEFINE_bool("overwrite", False, overwrite_help, flag_values=flag_values)


def select_strategy_from_flags(flag_values=FLAGS):
  """The tf.distribute strategy the shared flags ask for (imports TensorFlow)."""
  from bert_tf.training import distribution  # pylint: disable=g-import-not-at-top
  f = flag_values
  return distribution.select_strategy(f.strategy, f.use_tpu, f.tpu_name, f.tpu_zone, f.gcp_project,
                              f.master, f.num_tpu_cores)


def checked_strategy(settings, config, flag_values=FLAGS):
  """A fine-tuning command's settings checked against the config, then its strategy.

  Impossible flag values are usage errors (exit 2), found at once: before a multi-worker run
  waits for its cluster (the replica count's own checks come with the strategy).
  """
  from bert_tf.training.errors import TrainingError  # pylint: disable=g-import-not-at-top
  try:
    settings.check(config)
  except TrainingError as e:
    raise UsageError(str(e)) from None
  return select_strategy_from_flags(flag_values)


def apply_runtime_flags(flag_values=FLAGS) -> None:
  """Logging at INFO (unless --verbosity says otherwise) and, with --deterministic_ops,
  TensorFlow's op determinism."""
  if "verbosity" not in flag_values or not flag_values["verbosity"].present:
    logging.set_verbosity(logging.INFO)
  if "deterministic_ops" in flag_values and flag_values.deterministic_ops:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.config.experimental.enable_op_determinism()


# === Settings from flags ===


def settings_from_flags(cls: Type[T], flag_values=FLAGS, **overrides: Any) -> T:
  """Builds the dataclass `cls` from the flags named like its fields (overrides win).

  Fields without a same-named flag keep their defaults.
  """
  values = {}
  for field in dataclasses.fields(cls):
    if field.name in overrides:
      values[field.name] = overrides[field.name]
    elif field.name in flag_values:
      values[field.name] = flag_values[field.name].value
  return cls(**values)


def config_from_flags(flag_values=FLAGS):
  """The BertConfig of --bert_config_file, or else the config beside --init_checkpoint
  (bert_config.json, or Hugging Face's config.json); UsageError when there is neither."""
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  f = flag_values
  if f.bert_config_file:
    return BertConfig.from_json_file(f.bert_config_file)
  if f.init_checkpoint:
    from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
    config = checkpoints.config_beside(checkpoints.resolve_checkpoint(f.init_checkpoint))
    logging.info("Using the config beside --init_checkpoint: %s", config.to_json_string())
    return config
  raise UsageError("--bert_config_file is required (or an --init_checkpoint with its config "
                   "beside it: bert_config.json, or config.json for Hugging Face)")


def split_list(value: Optional[str]) -> Tuple[str, ...]:
  """A comma-separated flag value as a tuple (empty items dropped)."""
  return tuple(part.strip() for part in (value or "").split(",") if part.strip())


# === Label lists ===
# A label list flag (run_ner's --labels, run_classifier's --label_list) is comma-separated (absl's
# list flag, with CSV quoting), so a label holding a comma or a quote, such as the Penn Treebank
# tags `,` and `''`, is hard or impossible to give there. Its twin --<name>_file reads the labels
# from a file, one per line: any label can be given that way.
LABEL_FILE_SUFFIX = "_file"


def define_label_flags(flag_values=FLAGS, *, name: str, help_text: str) -> None:
  """--<name>, the labels comma-separated, and --<name>_file, the same from a file."""
  fv = dict(flag_values=flag_values)
  flags.DEFINE_list(name, [], f"{help_text} Comma-separated; for labels holding a comma or a "
                    f"quote, give --{name}{LABEL_FILE_SUFFIX}.", **fv)
  flags.DEFINE_string(name + LABEL_FILE_SUFFIX, None, f"A file with the labels of --{name}, one "
                      "per line in id order, so that any label can be given (e.g. the Penn "
                      "Treebank's `,` `:` `''`); spaces around a label and blank lines are "
                      f"ignored. Instead of --{name}.", **fv)


def read_label_file(path: str, flag: str) -> Tuple[str, ...]:
  """The labels of a label file (one per line, in id order), through bert_tf.io (gs:// too).

  Spaces around a label and blank lines are ignored; a label is anything else on its line.

  Raises:
    FileNotFoundError, IsADirectoryError: no file at `path`.
    ValueError: no label in it, a label given twice (naming both lines), or not UTF-8; every
      message starts with `<flag>=<path>`.
  """
  from bert_tf import io  # pylint: disable=g-import-not-at-top
  if not io.exists(path):
    raise FileNotFoundError(f"{flag}={path}: file not found")
  if io.isdir(path):
    raise IsADirectoryError(f"{flag}={path}: is a folder, not a file of labels")
  try:
    text = io.read_text(path)
  except UnicodeDecodeError as e:
    raise ValueError(f"{flag}={path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
  first_line = {}  # label -> the line it is on
  for number, line in enumerate(text.removeprefix("\ufeff").split("\n"), 1):
    label = line.strip()
    if not label:
      continue
    if label in first_line:
      raise ValueError(f"{flag}={path}:{number}: label {label!r} is given twice (first on "
                       f"line {first_line[label]})")
    first_line[label] = number
  if not first_line:
    raise ValueError(f"{flag}={path}: no labels in it (one label per line)")
  return tuple(first_line)


def labels_from_flags(name: str, flag_values=FLAGS) -> Tuple[str, ...]:
  """The labels given by --<name> or read from --<name>_file (empty: neither given).

  Raises:
    UsageError: both given.
    OSError, ValueError: see read_label_file.
  """
  listed = tuple(flag_values[name].value or ())
  path = flag_values[name + LABEL_FILE_SUFFIX].value
  if not path:
    return listed
  if listed:
    raise UsageError(f"--{name} and --{name}{LABEL_FILE_SUFFIX} contradict each other; give "
                     "one")
  return read_label_file(path, f"--{name}{LABEL_FILE_SUFFIX}")


# === Running a tool ===


def _one_line(error: BaseException) -> str:
  text = str(error) or type(error).__name__
  return " ".join(text.split())


def _path_flags(flag_values) -> Iterable[Tuple[str, str]]:
  """(flag name, one path) for every string flag set to something path-like (lists split)."""
  for name in flag_values:
    flag = flag_values[name]
    if not isinstance(flag.value, str) or not flag.value:
      continue
    for value in flag.value.split(","):
      if "/" in value or "." in value:
        yield name, value.strip()


# An embedding lookup of an id its table does not hold (CPU kernels check; a GPU reads zeros):
# the node names the layer (word_embeddings: token ids; embeddings: segment ids and packed
# positions), the message the id and the table's size.
_EMBEDDING_NODE = re.compile(r"\b(word_embeddings|embeddings)(?:_\d+)?/GatherV2\b")
_OUT_OF_RANGE = re.compile(r"indices\[[\d,]+\] = (-?\d+) is not in \[0, (\d+)\)")
# A tf.debugging.Assert of ours (its message starts with the flag it is about) and its data.
_ASSERTION = re.compile(r"assertion failed: \[(--[^\]]*)\] \[([^\]]*)\]")


def _embedding_index_line(text: str) -> Optional[str]:
  """One line for an embedding lookup out of its table (None for any other error)."""
  node, values = _EMBEDDING_NODE.search(text), _OUT_OF_RANGE.search(text)
  if node is None or values is None:
    return None
  index, size = values.groups()
  if node.group(1) == "word_embeddings":
    return (f"the input holds token id {index}, outside [0, {size}) of the config's vocab_size "
            "(--bert_config_file): the data was made with a larger vocab than the model's; "
            "make it with the model's vocab")
  return (f"the input holds segment id or position {index}, outside [0, {size}) of the "
          "config's type_vocab_size or max_position_embeddings (--bert_config_file)")


def describe_failure(error: BaseException, flag_values=FLAGS) -> str:
  """An OS or TensorFlow error as one line naming the flag whose path it is about.

  A read-only, full or missing location fails deep inside a write ("[Errno 30] Read-only file
  system: 'out/x.incomplete-9'", TensorFlow's "...; No space left on device [Op:SaveV2]"),
  where no flag is known. This finds the path flag whose value the failing path starts with
  (the longest such value) and puts `--flag=value: ` in front, unless the message already
  names a flag. Any other error's message is returned as it is, on one line.
  """
  text = _one_line(error)
  tf = sys.modules.get("tensorflow")
  op_error = tf is not None and hasattr(tf, "errors") and isinstance(error, tf.errors.OpError)
  if op_error:
    embedding = _embedding_index_line(text)
    if embedding:
      return embedding
    asserted = _ASSERTION.search(text)
    if asserted:  # its message and data, without the op's noise
      return " ".join(asserted.groups())
  if not (isinstance(error, OSError) or op_error) or " --" in f" {text}":
    return text
  filename = getattr(error, "filename", None)
  if op_error:
    text = _one_line(logs.without_tf_wrapping(getattr(error, "message", "") or text))
  elif filename and getattr(error, "strerror", None):
    text = str(error.strerror)
  best, inside = None, []
  for name, value in _path_flags(flag_values):
    value = value.rstrip("/") or value
    pattern = re.compile(r"(?:^|[\s'\"(])" + re.escape(value) + r"(?=$|[/.\s'\";:,)_-])")
    found = (str(filename) == value or str(filename).startswith(value + "/") or
             str(filename).startswith(value + ".")) if filename else pattern.search(text)
    if found and best is not None and value == best[1]:
      best = (f"{best[0]} / --{name}", value)  # two flags name this path: both are named
    elif found and (best is None or len(value) > len(best[1])):
      best = (name, value)
    if filename and value.startswith(str(filename).rstrip("/") + "/"):
      inside.append((name, value))  # the failing path is a folder on the way to this one
  if best is None and len(inside) == 1:
    best = inside[0]
  if best is None:
    return text if not filename else f"{filename}: {text}"
  name, value = best
  detail = f" ({filename})" if filename and str(filename) != value else ""
  return f"--{name}={value}: {text}{detail}"


def failure_types() -> Tuple[type, ...]:
  """The exception types a tool reports as a one-line failure (exit 1)."""
  types = [ValueError, OSError, KeyError]
  tf = sys.modules.get("tensorflow")
  if tf is not None and hasattr(tf, "errors"):
    types.append(tf.errors.OpError)
  return tuple(types)


ONEDNN_MACHINES = ("x86_64", "amd64")


def choose_cpu_kernels() -> None:
  """TensorFlow's oneDNN CPU kernels for this process on x86-64, unless TF_ENABLE_ONEDNN_OPTS is
  already set (TF_ENABLE_ONEDNN_OPTS=0 keeps Eigen's). Call before TensorFlow is imported: it
  reads the variable once, then.

  TensorFlow turns oneDNN on by itself only on CPUs with AVX-512 VNNI, BF16 or AMX; on AVX2
  machines it otherwise runs its Eigen kernels, and there training ran faster with oneDNN
  (benchmarks/HISTORY.md, "oneDNN (2026-11-23)"). ARM builds decide for themselves; Windows
  (no os.uname) is left alone. Without AVX-512 TensorFlow then logs one harmless E line per
  process that transposes int64 values (raw-text graphs do), which logs.py hides.
  """
  uname = getattr(os, "uname", None)  # POSIX only
  if uname is not None and uname().machine.lower() in ONEDNN_MACHINES:
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


def _lost_worker_line(error: BaseException, flag_values) -> Optional[str]:
  """The one line for an error that says another worker of a multi-worker run was lost
  outside training (while the model is built, evaluated or exported; training itself raises
  stopping.WorkerLost): which task, the newest checkpoint of --output_dir and how to resume.
  None for any other error, and in runs of one worker (the cluster module is not loaded)."""
  cluster = sys.modules.get("bert_tf.training.cluster")
  if cluster is None:
    return None
  try:
    lost = cluster.lost_tasks(error)
  except Exception:  # pylint: disable=broad-except
    return None  # naming the task is a courtesy: the error itself is then shown
  if lost is None:
    return None
  checkpoint = None
  output_dir = flag_values["output_dir"].value if "output_dir" in flag_values else None
  if output_dir:
    try:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      checkpoint = tf.train.latest_checkpoint(output_dir)
    except Exception:  # pylint: disable=broad-except
      checkpoint = None
  resume = (f"the last checkpoint is {checkpoint}: relaunch every worker with the same command "
            f"to resume from it" if checkpoint else
            "relaunch every worker with the same command to run it again")
  return (f"{cluster.describe_loss(lost)}; the run stopped outside training (while building, "
          f"evaluating or exporting the model); {resume} (exit status {EXIT_PREEMPTED})")


def _exit_at_once(status: int) -> None:
  """Runs the exit handlers (the quiet logs' filter prints what it holds), then ends the process
  without TensorFlow's teardown, which waits for the tasks of a broken cluster."""
  import atexit  # pylint: disable=g-import-not-at-top
  sys.stdout.flush()
  sys.stderr.flush()
  atexit._run_exitfuncs()  # pylint: disable=protected-access
  os._exit(status)  # pylint: disable=protected-access


def run(main: Callable[[Sequence[str]], Optional[int]],
        define_flags: Callable[..., None], program: str,
        argv: Optional[Sequence[str]] = None, flag_values=FLAGS) -> None:
  """Defines the flags, parses argv and runs main with the exit convention; never returns.

  Args:
    main: takes the remaining argv; returns None or an exit status. It signals failures by
      raising: ValueError/OSError/KeyError/tf.errors.OpError (and their subclasses) become
      exit 1 with a one-line message, UsageError and app.UsageError exit 2.
    define_flags: defines the tool's flags on `flag_values`.
    program: the tool's name in messages.
    argv: defaults to sys.argv.
  """
  argv = list(sys.argv if argv is None else argv)
  define_flags(flag_values)
  if any(a in ("--help", "-h", "-?", "--helpshort", "--helpfull") for a in argv[1:]):
    module = sys.modules.get(getattr(main, "__module__", ""), None)
    doc = getattr(module, "__doc__", None) or ""
    print(doc.strip() + "\n" if doc.strip() else "", end="")
    if "--helpfull" in argv:
      print(flag_values.get_help())
    else:  # the tool's own flags and the shared ones; --helpfull adds absl's
      print("\n\n".join(flag_values.module_help(module)
                         for module in sorted(flag_values.flags_by_module_dict())
                         if not module.startswith("absl.")))
    sys.exit(EXIT_OK)

  def parse(args):
    try:
      return flag_values(args)
    except flags.Error as e:
      print(f"{program}: usage error: {_one_line(e)} (see --help)", file=sys.stderr)
      sys.exit(EXIT_USAGE)

  def guarded(args):
    try:
      status = main(args)
    except SystemExit as e:
      if getattr(e, "exit_at_once", False) and flag_values is FLAGS:
        _exit_at_once(e.code)
      raise
    except (UsageError, app.UsageError) as e:
      print(f"{program}: usage error: {_one_line(e)} (see --help)", file=sys.stderr)
      sys.exit(EXIT_USAGE)
    except errors.RunTerminated:
      print(f"{program}: stopped by SIGTERM outside the training steps: the checkpoints saved "
            "are kept (what the run wrote before its first one is removed); the same command "
            "goes on from them", file=sys.stderr)
      sys.exit(EXIT_TERMINATED)
    except failure_types() as e:  # pylint: disable=catching-non-exception
      if os.environ.get("BERT_TF_TRACEBACK"):
        raise
      lost = _lost_worker_line(e, flag_values)
      if lost:  # a worker lost outside training: restartable, as in training (WorkerLost)
        logging.error("%s", lost)
        if flag_values is FLAGS:
          _exit_at_once(EXIT_PREEMPTED)
        sys.exit(EXIT_PREEMPTED)
      try:
        message = describe_failure(e, flag_values)
      except Exception:  # pylint: disable=broad-except
        message = _one_line(e)  # the error itself matters more than naming its flag
      # One line, not also as a log line: absl logs to the same stderr.
      print(f"{program}: error: {message}", file=sys.stderr)
      sys.exit(EXIT_FAILURE)
    status = EXIT_OK if status is None else int(status)
    cluster = sys.modules.get("bert_tf.training.cluster")  # loaded by multi-worker runs only
    if cluster is not None and status == EXIT_OK:
      cluster.finishing(status)  # its tasks leave together, quietly
    sys.exit(status)

  remaining = parse(argv)
  if flag_values is FLAGS:
    choose_cpu_kernels()  # before TensorFlow loads, as the quiet logs below
    logs.quiet_by_default(flag_values)  # before TensorFlow loads; -v 1 or BERT_TF_VERBOSE=1: all
    # absl's app.run sets up logging and its own flags (--run_with_pdb, ...) on FLAGS.
    app.run(guarded, argv=argv, flags_parser=lambda _: remaining)
  else:  # a tool run on its own FlagValues (tests): no absl app machinery
    guarded(remaining)
