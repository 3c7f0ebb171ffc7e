"""Several runs of one fine-tuning command: --seeds (run_seeds: the same run under each seed,
summarised as mean and standard deviation) and the paper's hyperparameter sweep (run_sweep:
one run per point of the grid, the best point by dev results). Each point runs in a folder of
its own with the `runner` the command hands in (fine_tuning.run around its task) and leaves its
results there, so a rerun of the command takes finished points from their folders."""

import dataclasses
import json
import math
from typing import Any, Callable, Dict, List, Mapping, Sequence, Tuple

from absl import logging
import numpy as np

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.model import exporting
from bert_tf.training import distribution
from bert_tf.training import run_folder
from bert_tf.training.errors import TrainingError

# Written in each seed's or sweep point's folder when it finishes: a rerun of the --seeds or
# --sweep command takes its results from there instead of running it again.
POINT_RESULTS_FILE = "point_results.json"

Runner = Callable[..., Dict[str, Any]]


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
  """The run's metrics (not its per-example arrays, e.g. eval_probabilities)."""
  return {k: float(v) for k, v in result.items()
          if (k.startswith(("eval_", "teacher_eval_")) or k in ("loss", "global_step"))
          and np.ndim(v) == 0}


def _refuse_repeats(flag: str, values: Sequence[Any]) -> None:
  repeated = sorted({str(v) for v in values if list(values).count(v) > 1})
  if repeated:
    raise TrainingError(f"{flag} repeats {', '.join(repeated)}: each run needs its own "
                             "folder; give each value once")


def _point_settings(settings) -> Dict[str, Any]:
  return json.loads(json.dumps(dataclasses.asdict(settings), default=str))


def _run_point(config, settings, strategy, runner: Runner) -> Dict[str, float]:
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
    before = done.get("settings") or {}
    changed = sorted(k for k in set(before) | set(wanted) if before.get(k) != wanted.get(k))
    if not run_folder.holds_checkpoints(settings.output_dir):
      # Nothing to resume (a sweep keeps only its best point's checkpoints): it trains anew.
      logging.info("%s finished earlier with other settings (%s): run again",
                   settings.output_dir, ", ".join(changed))
      return _run_and_record(config, settings, strategy, runner, path, wanted)
    # Its checkpoints would be resumed at their last step, not trained again: the results
    # would be the old settings' under the new ones' name.
    raise TrainingError(
        f"{settings.output_dir} finished earlier with other settings ("
        + ", ".join(f"{k}: {before.get(k)!r} -> {wanted.get(k)!r}" for k in changed[:6])
        + (", ..." if len(changed) > 6 else "") + "): its checkpoints would be resumed, not "
        "trained again; give another --output_dir, or remove that folder to run it again")
  return _run_and_record(config, settings, strategy, runner, path, wanted)


def _run_and_record(config, settings, strategy, runner: Runner, path: str,
                    wanted: Mapping[str, Any]) -> Dict[str, float]:
  """Runs one point and writes its POINT_RESULTS_FILE; its eval results."""
  results = _scalar_results(runner(config, settings, strategy))
  if strategy is None or distribution.is_chief(strategy):
    io.makedirs(settings.output_dir)
    io.write_text(path, json.dumps(dict(settings=wanted, results=results), indent=2,
                                   sort_keys=True) + "\n")
  return results


def run_seeds(config: BertConfig, settings, seeds: Sequence[int], runner: Runner,
              strategy=None) -> Dict[str, Any]:
  """The same run once per seed in <output_dir>/seed_<s>, and mean ± std of every metric.

  Writes <output_dir>/seeds_summary.txt (`metric = mean +- std`, one line per metric, and the
  per-seed values). Returns {"runs": {seed: eval results}, "summary": {metric: (mean, std)}}.
  """
  if not seeds:
    raise TrainingError("--seeds is empty")
  if not settings.do_eval:
    raise TrainingError("--seeds compares dev results: add --do_eval")
  _refuse_repeats("--seeds", seeds)
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


def sweep_grid(learning_rates: Sequence[float], epochs: Sequence[float],
               batch_sizes: Sequence[int]) -> List[Tuple[float, float, int]]:
  return [(lr, ep, bs) for bs in batch_sizes for lr in learning_rates for ep in epochs]


def _grid_name(lr: float, epochs: float, batch: int) -> str:
  return f"lr{lr:g}_ep{epochs:g}_bs{batch}"


def run_sweep(config: BertConfig, settings, runner: Runner,
              primary_metric: Callable[[Mapping[str, float]], str],
              learning_rates: Sequence[float] = (5e-5, 3e-5, 2e-5),
              epochs: Sequence[float] = (2.0, 3.0, 4.0), batch_sizes: Sequence[int] = (16, 32),
              seeds: Sequence[int] = (), strategy=None, keep_all_checkpoints: bool = False
              ) -> Dict[str, Any]:
  """The paper's fine-tuning grid: one run (or one per seed) per learning rate x epochs x batch
  in <output_dir>/<lr..._ep..._bs...>, ranked by primary_metric(a point's results) on dev (the
  mean over seeds). The best run keeps its checkpoints and export, the others keep their
  results only (unless keep_all_checkpoints). Writes <output_dir>/sweep_summary.tsv and
  best_run.txt.
  """
  if not settings.do_train or not settings.do_eval:
    raise TrainingError("--sweep trains and compares dev results: it needs --do_train "
                             "and --do_eval")
  grid = sweep_grid(learning_rates, epochs, batch_sizes)
  if not grid:
    raise TrainingError("the sweep grid is empty")
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
      summary = run_seeds(config, point, seeds, runner, strategy)["summary"]
      means = {k: mean for k, (mean, _) in summary.items()}
      stds = {k: std for k, (_, std) in summary.items()}
    else:
      means, stds = _run_point(config, point, strategy, runner), {}
    rows.append(dict(name=name, learning_rate=lr, num_train_epochs=ep, train_batch_size=bs,
                     means=means, stds=stds))
  metric = primary_metric(rows[0]["means"])
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
        name == exporting.EXPORT_DIR:
      io.remove(io.join(run_dir, name))
