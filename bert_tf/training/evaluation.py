"""Evaluation and prediction with a loop.Trainer: eval sums over batches, eval_results.txt and
its summaries, predictions gathered by example index."""

import os
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf.training import loop


EVAL_RESULTS_FILE = "eval_results.txt"


def evaluate(trainer: loop.Trainer, iterator, num_steps: int, global_step: int,
             output_dir: Optional[str], chief: bool, results_file: bool = True,
             log_every_seconds: float = 10.0) -> Dict[str, float]:
  """Runs num_steps eval batches; the chief writes eval summaries (output_dir/eval) and, with
  results_file, eval_results.txt.

  Progress (batches, batches/s, ETA) is logged every log_every_seconds and at the end; the
  first batch of a run also traces and compiles the eval step (loop.Trainer.eval_step is one
  tf.function for the run: later evaluations, on new iterators of the same dataset, reuse it),
  so the rate counts the batches after it. With results_file the results are logged one per
  line (the original's format), otherwise on one line (evaluations during training).
  """
  logging.info("Evaluating %d batches at step %d", num_steps, global_step)
  start = time.time()
  last_log = start
  first_seconds = 0.0
  batch_sums = []
  for i in range(num_steps):
    batch_sums.append({k: v.numpy() for k, v in trainer.eval_step(iterator).items()})
    now = time.time()
    if i == 0:
      first_seconds = now - start
    if now - last_log >= log_every_seconds or i + 1 == num_steps:
      last_log = now
      rate = i / max(now - start - first_seconds, 1e-9) if i else 1 / max(first_seconds, 1e-9)
      logging.info("eval %d/%d batches, %.1f batches/s (first %.1f s), ETA %s", i + 1,
                   num_steps, rate, first_seconds, loop.format_eta((num_steps - i - 1) / rate))
  results = trainer.task.eval_results(batch_sums)
  results["global_step"] = int(global_step)
  if results_file:
    report_eval_results(results, output_dir, chief)
  else:
    logging.info("eval at step %d: %s (%.1f s, off the training clock)", global_step,
                 " ".join(f"{key} = {results[key]:.4f}" for key in sorted(results)
                          if key != "global_step"), time.time() - start)
  if chief and output_dir:
    writer = tf.summary.create_file_writer(os.path.join(output_dir, "eval"))
    with writer.as_default():
      for key, value in results.items():
        if key != "global_step":
          tf.summary.scalar(key, value, step=results["global_step"])
    writer.close()  # written now: TensorBoard shows each evaluation of a running job
  return results


def report_eval_results(results: Mapping[str, Any], output_dir: Optional[str],
                        chief: bool) -> None:
  """Logs the final results one per line and the chief writes eval_results.txt."""
  logging.info("***** Eval results *****")
  for key in sorted(results):
    logging.info("  %s = %s", key, results[key])
  if chief and output_dir:
    write_eval_results(os.path.join(output_dir, EVAL_RESULTS_FILE), results)


def predict(trainer: loop.Trainer, iterator, num_steps: int, index_key: str = "example_index",
            keep: Tuple[str, ...] = (), sequence_length: Optional[int] = None
            ) -> Dict[str, Any]:
  """Per-example outputs over num_steps batches, in example order, without padding.

  The batches must carry `index_key` (the example's position; negative for padding, see
  input_pipeline.record_dataset), so the order is restored whatever the strategy's
  distribution of batches over replicas and workers. With sequence_length (the records'
  length), per-position outputs of batches cut to a length bucket come back padded to it (the
  cut positions hold input_pipeline.PADDED_LOGIT).

  Returns:
    {name: numpy array [N, ...]} for each model output, `index_key` and the `keep` entries.
  """
  keep = tuple(dict.fromkeys((index_key,) + tuple(keep)))
  chunks: Dict[str, List[Any]] = {}
  start = time.time()
  for step in range(num_steps):
    for key, value in trainer.predict_step(iterator, keep, sequence_length).items():
      chunks.setdefault(key, []).append(value.numpy())
    if (step + 1) % 100 == 0 or step + 1 == num_steps:
      elapsed = time.time() - start
      logging.info("predicted %d/%d batches, %.1f batches/s, ETA %s", step + 1, num_steps,
                   (step + 1) / max(elapsed, 1e-9),
                   loop.format_eta(elapsed / (step + 1) * (num_steps - step - 1)))
  arrays = {key: np.concatenate(values, axis=0) for key, values in chunks.items()}
  index = arrays[index_key]
  order = np.argsort(index, kind="stable")
  order = order[index[order] >= 0]
  return {key: value[order] for key, value in arrays.items()}


def sum_batches(batch_sums: Iterable[Mapping[str, Any]]) -> Dict[str, float]:
  """Adds up per-batch sums key by key."""
  batch_sums = list(batch_sums)
  return {k: sum(float(b[k]) for b in batch_sums) for k in batch_sums[0]}


def write_eval_results(path: str, results: Mapping[str, Any]) -> None:
  """Writes `key = value` lines sorted by key (the original's format), atomically."""
  io.write_text(path, "".join(f"{key} = {results[key]}\n" for key in sorted(results)))


def read_eval_results(path: str) -> Dict[str, float]:
  """Parses an eval_results.txt back into a dict."""
  results = {}
  for line in io.read_text(path).splitlines():
    if line.strip():
      key, value = line.split(" = ", 1)
      results[key] = float(value)
  return results
