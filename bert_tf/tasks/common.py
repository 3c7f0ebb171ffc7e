"""What every fine-tuning command shares: the tokenizer checks and the run's task_info.json.

The tokenizer a model was trained with must be the one it is fine-tuned and served with: a cased
checkpoint fine-tuned with the default do_lower_case=True reads "February" as `f ##eb ##ru ##ary`
and still trains, only worse (google-research/bert#20, #1373). The original checked casing only
for seven directory names (tokenization.validate_case_matches_checkpoint). Here every source of
the truth beside a checkpoint is read:

  task_info.json       written by our fine-tuning runs (casing, vocab checksum, labels)
  data_metadata.json   written by run_pretraining and the exports (the data's casing and vocab)
  tokenizer_config.json  Hugging Face's (do_lower_case)
  vocab.txt            beside the original's and Hugging Face's checkpoints (compared by md5)
  the original's release directory names (uncased_L-12_H-768_A-12, ...), as the original did.

A contradiction stops the run with both values and both files named, unless the caller allows
it (a loud warning then).
"""

import dataclasses
import json
import re
from typing import Any, Dict, List, Optional

from absl import logging

from bert_tf import features
from bert_tf import io
from bert_tf import tokenization
from bert_tf.training import loop
from bert_tf.training import pretraining

TASK_INFO_FILE = "task_info.json"
DATA_METADATA_FILE = pretraining.DATA_METADATA_FILE

# The original's tokenization.validate_case_matches_checkpoint lists.
_UNCASED_RELEASES = ("uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
                     "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12")
_CASED_RELEASES = ("cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16",
                   "multi_cased_L-12_H-768_A-12")


_SOURCE_KEYS = {"do_lower_case": "casing_source", "vocab_md5": "vocab_source"}


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


class TokenizerMismatchError(ValueError):
  """The flags' tokenizer (vocab, casing) contradicts what the checkpoint was trained with."""


def checkpoint_directory(path: str) -> str:
  """The directory holding a checkpoint (the path itself for a run directory)."""
  if io.isdir(path):
    return path.rstrip("/")
  return path.rsplit("/", 1)[0] if "/" in path else "."


def _read_json(path: str) -> Optional[Dict[str, Any]]:
  if not io.exists(path):
    return None
  try:
    value = json.loads(io.read_text(path))
  except ValueError:
    logging.warning("%s is not valid JSON; not used to check the tokenizer", path)
    return None
  return value if isinstance(value, dict) else None


def recorded_tokenizer(checkpoint: str) -> Dict[str, Any]:
  """What is known of the tokenizer a checkpoint was trained with.

  Returns:
    A dict with any of: do_lower_case (bool) and casing_source (the file or rule it came from);
    vocab_md5 and vocab_source.
  """
  directory = checkpoint_directory(checkpoint)
  found: Dict[str, Any] = {}

  def take(key, value, source):
    if value is not None and key not in found:
      found[key] = value
      found[_SOURCE_KEYS[key]] = source

  for name in (TASK_INFO_FILE, DATA_METADATA_FILE):
    info = _read_json(f"{directory}/{name}")
    if info:
      take("do_lower_case", info.get("do_lower_case"), f"{directory}/{name}")
      take("vocab_md5", info.get("vocab_md5"), f"{directory}/{name}")
  hf = _read_json(f"{directory}/tokenizer_config.json")
  if hf and isinstance(hf.get("do_lower_case"), bool):
    take("do_lower_case", hf["do_lower_case"], f"{directory}/tokenizer_config.json")
  vocab = f"{directory}/vocab.txt"
  if io.exists(vocab):
    take("vocab_md5", features.vocab_checksum(vocab), vocab)
  match = re.search(r"([^/]+)/bert_model\.ckpt", checkpoint)
  if match and match.group(1) in _UNCASED_RELEASES + _CASED_RELEASES:
    take("do_lower_case", match.group(1) in _UNCASED_RELEASES,
         f"the original release name {match.group(1)}")
  return found


def check_tokenizer(checkpoint: Optional[str], vocab_file: str, do_lower_case: bool,
                    allow_mismatch: bool = False, vocab_md5: Optional[str] = None) -> None:
  """Refuses a vocab or casing that contradicts what `checkpoint` was trained with.

  Args:
    checkpoint: the --init_checkpoint (or a run directory); None checks nothing.
    vocab_file: the --vocab_file.
    do_lower_case: the --do_lower_case.
    allow_mismatch: log the contradictions as warnings instead of raising.
    vocab_md5: the vocab file's checksum, when the caller has it already.

  Raises:
    TokenizerMismatchError: naming the flag, its value, the recorded value and its file.
  """
  if not checkpoint:
    return
  recorded = recorded_tokenizer(checkpoint)
  problems: List[str] = []
  if "do_lower_case" in recorded and bool(recorded["do_lower_case"]) != bool(do_lower_case):
    problems.append(
        f"--do_lower_case={do_lower_case} but the checkpoint was trained with "
        f"do_lower_case={recorded['do_lower_case']} ({recorded['casing_source']}); pass "
        f"--do_lower_case={recorded['do_lower_case']}")
  if "vocab_md5" in recorded:
    md5 = vocab_md5 or features.vocab_checksum(vocab_file)
    if md5 != recorded["vocab_md5"]:
      problems.append(
          f"--vocab_file={vocab_file} (md5 {md5}) is not the vocab the checkpoint was trained "
          f"with (md5 {recorded['vocab_md5']}, {recorded['vocab_source']})")
  if not problems:
    return
  message = "; ".join(problems)
  if allow_mismatch:
    logging.warning("TOKENIZER MISMATCH (allowed by --allow_tokenizer_mismatch): %s", message)
    return
  raise TokenizerMismatchError(message + " (--allow_tokenizer_mismatch overrides this check)")


def check_vocab_fits(vocab_file: str, size: int, vocab_size: int) -> None:
  """Refuses a vocab (of `size` tokens) with more tokens than the config's vocab_size (ids
  would be out of range); a smaller one is allowed (configs pad vocab_size, e.g. to a multiple
  of 8), with a warning."""
  if size > vocab_size:
    raise TokenizerMismatchError(
        f"--vocab_file={vocab_file} has {size} tokens but the config's vocab_size is "
        f"{vocab_size}: the vocab does not belong to --bert_config_file")
  if size < vocab_size:
    logging.warning("--vocab_file has %d tokens, fewer than the config's vocab_size %d "
                    "(padded embedding table?)", size, vocab_size)


def write_task_info(output_dir: str, info: Dict[str, Any]) -> None:
  io.write_text(io.join(output_dir, TASK_INFO_FILE),
                json.dumps(info, indent=2, sort_keys=True) + "\n")


def read_task_info(directory: str) -> Optional[Dict[str, Any]]:
  return _read_json(io.join(checkpoint_directory(directory), TASK_INFO_FILE))



def run_tokenizer(config, settings, resuming: bool):
  """The FullTokenizer of a fine-tuning run (settings.vocab_file, settings.do_lower_case) and
  the vocab's md5, after checking that the vocab fits the config and agrees with what
  settings.init_checkpoint and, when resuming, settings.output_dir were trained with."""
  tokenizer = tokenization.FullTokenizer(settings.vocab_file, settings.do_lower_case)
  vocab_md5 = features.vocab_checksum(settings.vocab_file)
  check_vocab_fits(settings.vocab_file, len(tokenizer.vocab), config.vocab_size)
  for checkpoint in (settings.init_checkpoint, settings.output_dir if resuming else None):
    check_tokenizer(checkpoint, settings.vocab_file, settings.do_lower_case,
                    settings.allow_tokenizer_mismatch, vocab_md5=vocab_md5)
  return tokenizer, vocab_md5


def prepare_output_dir(config, settings, strategy, chief: bool, info: Dict[str, Any]) -> str:
  """Starts a fine-tuning run's output_dir once its inputs are known to be good.

  Creates output_dir; the chief writes bert_config.json and task_info.json there; other
  workers write their records to a scratch directory of their own. Seeds Keras with
  settings.seed when given.

  Returns:
    The directory this process writes its records to.
  """
  # Nothing is written to output_dir before a resume is known to fit its checkpoints.
  loop.check_resume_compatible(settings.output_dir, config, settings)
  io.makedirs(settings.output_dir)
  record_dir = settings.output_dir if chief else io.join(
      settings.output_dir, f".worker_{strategy.cluster_resolver.task_id}_records")
  io.makedirs(record_dir)
  if chief:
    loop.record_run(settings.output_dir, config, settings)
    write_task_info(settings.output_dir, info)
  if settings.seed is not None:
    import keras  # pylint: disable=g-import-not-at-top
    keras.utils.set_random_seed(settings.seed)
  return record_dir
