"""Renders the benchmark tables of benchmarks/README.md and README.md from the committed results
files (benchmarks/results/*.json), so that every rendered figure has one source.

A rendered table sits between two marker comments in the page:

  <!-- table: NAME -->
  | ... the table ... |
  <!-- end table -->

NAME is a key of TABLES below: a function of the results files that returns the table's lines.
Prose around a table is the page's own; the figures inside the markers are the renderer's.

  python benchmarks/render.py            # rewrites the tables in place
  python benchmarks/render.py --check    # exits 1 naming each table that differs (CI's test)

A marker whose NAME is not in TABLES, or a table in TABLES that no page holds, stops the run with
the name: a results file without its table, or a table without its file, is an error.
"""

import argparse
import functools
import json
import os
import re
import statistics
import sys

BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCHMARKS)
RESULTS = os.path.join(BENCHMARKS, "results")
PAGES = (os.path.join(BENCHMARKS, "README.md"), os.path.join(REPO_ROOT, "README.md"))
sys.path.insert(0, BENCHMARKS)
import curves  # pylint: disable=g-import-not-at-top,wrong-import-position
import serving  # pylint: disable=g-import-not-at-top,wrong-import-position

MARKER = re.compile(r"^<!-- table: (?P<name>[\w.-]+) -->\n(?P<body>.*?)^<!-- end table -->$",
                    re.M | re.S)


def read(name: str) -> dict:
  with open(os.path.join(RESULTS, name), encoding="utf-8") as f:
    return json.load(f)


# === Serving (serving.py) ===

# The results' row names -> the page's.
SERVING_ROWS = {"ours": "ours (float32)", "ours: bf16": "ours: bfloat16",
                "ours: classifier export": "ours: classifier export",
                "ours: tagger export": "ours: tagger export",
                "ours: SQuAD export": "ours: SQuAD export", "ONNX Runtime": "ONNX Runtime",
                "Hugging Face PyTorch": "Hugging Face PyTorch"}
SERVING_PEERS = ("ONNX Runtime", "Hugging Face PyTorch")
# The rows the bold marks the best of in each column: the text models and the peers (the task
# exports answer other requests).
SERVING_TEXT_ROWS = ("ours", "ours: bf16") + SERVING_PEERS


def _best(summary, name, key):
  values = [summary[row][name][key] for row in SERVING_TEXT_ROWS if row in summary]
  return min(values) if key.endswith("_ms") else max(values)


def serving_figures(results_name):
  """One thread: b1 p50 / p99 and the batch throughputs of every row; the best of the text
  models and peers in bold."""
  saved = read(results_name)
  summary = saved["summary"]["1"]
  cols = serving.columns(saved["settings"]["plan"], every_set_named=False)
  lines = ["| one thread | " + " | ".join(c[2] for c in cols) + " |",
           "| --- |" + " --: |" * len(cols)]
  for row, label in SERVING_ROWS.items():
    cells = []
    for name, key, _ in cols:
      cell = summary[row][name]
      bold = row in SERVING_TEXT_ROWS and cell[key] == _best(summary, name, key)
      text = f"{cell[key]:.2f}" if key == "p50_ms" else f"{cell[key]:.1f}"
      text = f"**{text}**" if bold else text
      cells.append(f"{text} / {cell['p99_ms']:.2f}" if key == "p50_ms" else text)
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  return lines


def serving_ratios(results_name):
  """Ours' speed over the faster peer's, per row of ours but the SQuAD export (no peer answers
  its request); the faster peer in brackets."""
  saved = read(results_name)
  summary = saved["summary"]["1"]
  cols = serving.columns(saved["settings"]["plan"], every_set_named=False)
  headers = [c[2].replace(": b1 p50 / p99 ms", " b1").replace(" /s", "") for c in cols]
  headers[0] = "short b1"
  lines = ["| one thread | " + " | ".join(headers) + " |", "| --- |" + " --: |" * len(cols)]
  for row, label in SERVING_ROWS.items():
    if row in SERVING_PEERS or "SQuAD" in row:
      continue
    cells = []
    for name, key, _ in cols:
      ratio, peer = _faster_peer_ratio(summary, row, name, key)
      cells.append(f"{ratio:.2f} ({'ORT' if peer == 'ONNX Runtime' else 'HF'})")
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  return lines


def _faster_peer_ratio(summary, row, name, key):
  """(ours' speed over the faster peer's, that peer's name) for one cell (serving.py's rule)."""
  peers = [(p, summary[p][name][key]) for p in SERVING_PEERS]
  if key.endswith("_ms"):
    peer, value = min(peers, key=lambda p: p[1])
    return value / summary[row][name][key], peer
  peer, value = max(peers, key=lambda p: p[1])
  return summary[row][name][key] / value, peer


def serving_summary(results_name):
  """The README's summary: the text model in both precisions against the faster peer, at batch 1
  and 32 on short text and batch 32 on long text (the first row names the peer)."""
  summary = read(results_name)["summary"]["1"]
  cells = (("short", "p50_ms"), ("short", "batch32_per_s"), ("long", "batch32_per_s"))
  lines = ["| export | short text, batch 1 (p50) | short, batch 32 | long (~130 WordPieces), "
           "batch 32 |", "| --- | --: | --: | --: |"]
  for row, label in (("ours", "default (float32)"),
                     ("ours: bf16", "`--serving_precision=bfloat16`")):
    texts = []
    for name, key in cells:
      ratio, peer = _faster_peer_ratio(summary, row, name, key)
      texts.append(f"{ratio:.2f}x" + (f" {peer.replace('Hugging Face PyTorch', 'Hugging Face')}"
                                      f"'s" + (" speed" if key.endswith("_ms") else "")
                                      if row == "ours" else ""))
    lines.append(f"| {label} | " + " | ".join(texts) + " |")
  return lines


def _goal_cell(ratio, bound):
  return f"**met ({ratio:.2f}x)**" if ratio >= bound else f"missed ({ratio:.2f}x)"


def _p99_cell(summary, row, bound=1.5):
  """'short met (1.38); medium and long missed (1.89, 1.72)': p99 / p50 at batch 1 per set."""
  sets = [name for name in ("short", "medium", "long") if name in summary[row]]
  ratios = {name: summary[row][name]["p99_ms"] / summary[row][name]["p50_ms"] for name in sets}
  parts = []
  for verdict, chosen in (("met", [n for n in sets if ratios[n] <= bound]),
                          ("missed", [n for n in sets if ratios[n] > bound])):
    if chosen:
      names = ", ".join(chosen[:-1]) + (" and " if len(chosen) > 1 else "") + chosen[-1]
      parts.append(f"{names} {verdict} ({', '.join(f'{ratios[n]:.2f}' for n in chosen)})")
  return "; ".join(parts)


def serving_goals(results_name):
  """The serving goals, one thread, for the text model in both precisions: batch-1 short p50
  against ONNX Runtime's (speed >= 1.25x), batch-32 throughput against the faster peer on short
  (>= 1.5x) and long text (>= 1.2x), p99 at most 1.5x p50 at batch 1 on each set."""
  summary = read(results_name)["summary"]["1"]
  rows = ("ours", "ours: bf16")
  b1 = [summary["ONNX Runtime"]["short"]["p50_ms"] / summary[r]["short"]["p50_ms"] for r in rows]
  b32 = {name: [_faster_peer_ratio(summary, r, name, "batch32_per_s")[0] for r in rows]
         for name in ("short", "long")}
  return ["| goal | float32 (the default) | bfloat16 |", "| --- | --- | --- |",
          "| batch 1, short text: p50 at most 0.8x ONNX Runtime's (speed >= 1.25x) | "
          + " | ".join(_goal_cell(r, 1.25) for r in b1) + " |",
          "| batch 32, short text: >= 1.5x the faster peer's throughput | "
          + " | ".join(_goal_cell(r, 1.5) for r in b32["short"]) + " |",
          "| batch 32, long text: >= 1.2x the faster peer's | "
          + " | ".join(_goal_cell(r, 1.2) for r in b32["long"]) + " |",
          "| p99 at most 1.5x p50 at batch 1 | "
          + " | ".join(_p99_cell(summary, r) for r in rows) + " |"]


def serving_tails(results_name):
  """p99 / p50 at batch 1, one thread, per system and set: over the set's requests (the goal's
  measure, the texts' spread of lengths included) and over as many requests of one text of the
  set's median length (the tail the system adds by itself)."""
  summary = read(results_name)["summary"]["1"]
  rows = [r for r in SERVING_TEXT_ROWS if r in summary]
  sets = [name for name in ("short", "medium", "long") if name in summary[rows[0]]]
  lines = ["| batch 1, one thread: p99 / p50 | " + " | ".join(
      f"{name}: the set's requests | {name}: one text repeated" for name in sets) + " |",
           "| --- |" + " --: | --: |" * len(sets)]
  for row in rows:
    cells = []
    for name in sets:
      cell = summary[row][name]
      cells += [f"{cell['p99_ms'] / cell['p50_ms']:.2f}",
                f"{cell['same_text_p99_ms'] / cell['same_text_p50_ms']:.2f}"]
    lines.append(f"| {SERVING_ROWS[row]} | " + " | ".join(cells) + " |")
  return lines


# === finetuning.py's extract_features rows and tokenization.py ===


def extract_features(results_name):
  """Lines/s per preset: the model alone, and the whole command to npz and to JSON lines (the
  output's size beside it)."""
  rows = read(results_name)["results"]["rows"]
  lines = ["| preset | model only (lines/s) | whole command, npz | whole command, jsonl |",
           "| --- | --: | --: | --: |"]
  presets = []
  for row in rows:
    match = re.match(r"extract_features (\w+), \d+ lines", row["measurement"])
    if match and match.group(1) not in presets:
      presets.append(match.group(1))
  for preset in presets:
    mine = {row["system"]: row["examples_per_second"] for row in rows
            if row["measurement"].startswith(f"extract_features {preset},")}
    cells = [mine.pop("model only (FeatureExtractor)")]
    for output_format in ("npz", "jsonl"):
      (system,) = [s for s in mine if s.startswith(f"whole command, {output_format} (")]
      size = re.search(r"\((.+)\)", system).group(1)
      cells.append(f"{mine[system]} ({size})")
    lines.append(f"| {preset} | " + " | ".join(cells) + " |")
  return lines


def tokenization(results_name):
  """MB/s, wordpieces/s and the speed against the character-at-a-time tokenizer of each
  tokenizer, and the share of lines whose ids equal the reference's."""
  (run,) = read(results_name)["results"]["runs"]
  lines = ["| tokenizer | MB/s | wordpieces/s | speed vs the original's way | lines equal to "
           "the reference's |", "| --- | --: | --: | --: | --: |"]
  for row in run["rows"]:
    lines.append(f"| {row['tokenizer']} | {row['mb_per_second']:.2f} | "
                 f"{row['wordpieces_per_second']:,.0f} | {row['speedup']:.1f}x | "
                 f"{100 * row['lines_equal_to_reference']:.2f}% |")
  return lines


# === pretraining_data.py ===


def pretraining_data(results_name):
  """Per corpus size and mode: instances, wall and CPU seconds, instances per CPU second, the
  largest process's memory, and the default mode over the reference mode in the same run."""
  rows = read(results_name)["results"]["rows"]
  lines = ["| input | mode | instances | wall s | CPU s | instances per CPU second | largest "
           "process MB | default / reference: per CPU second, memory |",
           "| --- | --- | --: | --: | --: | --: | --: | --: |"]
  for row in rows:
    versus = ""
    if row["mode"] == "default":
      reference = [r for r in rows if r["mode"] == "reference" and r["size"] == row["size"]
                   and r["seed"] == row["seed"]]
      if reference:
        speed = (row["instances"] / row["cpu"]) / (reference[0]["instances"] / reference[0]["cpu"])
        versus = f"{speed:.2f}x, {row['max_rss_mb'] / reference[0]['max_rss_mb']:.2f}x"
    lines.append(f"| {row['actual_mb']:.1f} MB | {row['mode']} | {row['instances']:,.0f} | "
                 f"{row['wall']:.1f} | {row['cpu']:.1f} | {row['instances'] / row['cpu']:,.0f} | "
                 f"{row['max_rss_mb']:,.0f} | {versus} |".replace("|  |", "| |"))
  return lines


# === Training speed: finetuning.py, squad.py, model_step.py, pretraining.py,
# packed_pretraining.py, length_aware.py; accuracy: grouping_accuracy.py ===


def _row(cells):
  """A Markdown table row of the cells (an empty cell as '| |')."""
  return re.sub(r" {2,}\|", " |", "| " + " | ".join(str(c) for c in cells) + " |")


def measurements(results_name, rate_header, ratio_header):
  """The script's printed table (harness.print_table's rows, as finetuning.py and squad.py write
  them): measurement, system, the rate, the ratio, the goal."""
  rows = read(results_name)["results"]["rows"]
  lines = [f"| measurement | system | {rate_header} | {ratio_header} | goal |",
           "| --- | --- | --: | --: | --- |"]
  for row in rows:
    lines.append(_row((row["measurement"], row["system"], row["examples_per_second"],
                       row["ratio"], row["goal"])))
  return lines


def _columns_table(rows, columns):
  """A table of `rows` (dicts) with `columns`: (header, alignment, the cell of a row)."""
  lines = ["| " + " | ".join(header for header, _, _ in columns) + " |",
           "| " + " | ".join(align for _, align, _ in columns) + " |"]
  return lines + [_row([cell(row) for _, _, cell in columns]) for row in rows]


def _ratio_text(value, suffix=""):
  return "-" if value is None else f"{value:.2f}{suffix}"


def model_step(results_name):
  """Per preset, mode and system: examples/s, tokens/s, GFLOP/s (the full model's FLOPs), the
  share of the matmul peak and the speed against Model Garden's."""
  return _columns_table(read(results_name)["results"]["rows"], (
      ("preset", "---", lambda r: r["preset"]), ("mode", "---", lambda r: r["mode"]),
      ("system", "---", lambda r: r["system"]),
      ("examples/s", "--:", lambda r: f"{r['examples_per_second']:.2f}"),
      ("tokens/s", "--:", lambda r: f"{r['tokens_per_second']:,.0f}"),
      ("GFLOP/s", "--:", lambda r: f"{r['gflops']:.1f}"),
      ("of peak", "--:", lambda r: f"{r['of_peak']:.0%}"),
      ("vs Model Garden", "--:", lambda r: _ratio_text(r["vs_model_garden"], "x"))))


def pretraining(results_name):
  """Per preset and run: steps/s, examples/s (min-max over rounds), the share of the matmul peak
  and the speed against Model Garden's (from records)."""
  return _columns_table(read(results_name)["results"]["rows"], (
      ("preset", "---", lambda r: r["preset"]), ("run", "---", lambda r: r["run"]),
      ("steps/s", "--:", lambda r: f"{r['steps_per_second']:.3f}"),
      ("examples/s (min-max)", "--:",
       lambda r: f"{r['examples_per_second']:.1f} ({r['min']:.1f}-{r['max']:.1f})"),
      ("fraction of matmul peak", "--:", lambda r: f"{r['fraction_of_peak']:.2f}"),
      ("ours / Model Garden", "--:", lambda r: _ratio_text(r["ours_over_model_garden"]))))


def _spread(values, digits):
  """median (min-max) of a list."""
  return (f"{statistics.median(values):,.{digits}f} ({min(values):,.{digits}f}-"
          f"{max(values):,.{digits}f})")


def packed_pretraining(results_name):
  """Per packing mode: instances/s and real tokens/s (median (min-max) over rounds), the share
  of computed positions that are real tokens, real tokens/s over the unpacked rows' (round by
  round) and the goal."""
  rows = read(results_name)["results"]["rows"]
  lines = ["| system | instances/s | real tokens/s | real tokens / positions | "
           "real tokens/s vs unpacked | goal |", "| --- | --: | --: | --: | --: | --- |"]
  for row in rows:
    ratio = _spread(row["over_unpacked"], 2) if row["over_unpacked"] else ""
    lines.append(_row((f"ours, {row['system']}", _spread(row["instances_per_second"], 2),
                       _spread(row["real_tokens_per_second"], 0),
                       f"{row['real_token_share']:.0%}", ratio, row["goal"])))
  return lines


def length_aware(results_name):
  """The training table of length_aware.py: task, system, examples/s, ours over the peer round
  by round, the goal, real-token GFLOP/s."""
  rows = read(results_name)["results"]["training"]
  lines = ["| task | system | examples/s | ratio | goal | real-token GFLOP/s |",
           "| --- | --- | --: | --: | --- | --: |"]
  for row in rows:
    lines.append(_row((row["task"], row["system"], row["examples_per_second"], row["ratio"],
                       row["goal"], row["real_token_gflops"])))
  return lines


def length_aware_serving(results_name):
  """length_aware.py's serving rows: the classifier export with and without length buckets."""
  lines = ["| export | batch 1 latency (ms) | latency ratio | batch 32 (texts/s) | throughput "
           "ratio | goal |", "| --- | --: | --: | --: | --: | --- |"]
  for row in read(results_name)["results"]["serving"]:
    # Older runs named the fixed-length export "(fixed, today)".
    export = row["export"].replace("(fixed, today)", "(fixed length)")
    lines.append(_row((export, row["batch1_latency_ms"], row["latency_ratio"],
                       row["batch32_texts_per_second"], row["throughput_ratio"], row["goal"])))
  return lines


# length_aware.py's system names as its results file writes them, and the README's task names.
LENGTH_AWARE_NAMES = {"ours": "ours, length buckets",
                      "ours_packed": "ours, packed rows (exact) + length buckets",
                      "ours_static": "ours, packed rows (static: one shape)",
                      "ours_fixed": "ours, fixed length",
                      "ours_grouped": "ours, length buckets + group_by_length",
                      "hf_dynamic": "HF PyTorch, dynamic padding",
                      "model_garden": "Model Garden, fixed length"}
LENGTH_AWARE_TASKS = {"short": "short sentences", "tagging": "CoNLL-length tagging",
                      "pairs": "sentence pairs", "squad": "SQuAD windows"}


def _length_aware_by_task(training):
  """{task: (its label's 'mean M of N', {system key: row})} of length_aware.py's training rows,
  in the file's order."""
  keys = {name: key for key, name in LENGTH_AWARE_NAMES.items()}
  tasks = {}
  for row in training:
    task, length = re.match(r"(\w+) \(mean (\d+ of \d+)\)", row["task"]).groups()
    tasks.setdefault(task, (length, {}))[1][keys.get(row["system"], row["system"])] = row
  return tasks


def _median_of(cell):
  """The median of a 'median (min-max)' cell (after an optional 'a / b: ' prefix), or None."""
  match = re.search(r"(?:^|: )([0-9.]+) \(", cell)
  return float(match.group(1)) if match else None


def _share_of(row):
  return re.search(r"real tokens (\d+%) of positions", row["real_token_gflops"]).group(1)


def length_bucket_gains(results_name):
  """README: our length-bucketed batches against our fixed length, Hugging Face's dynamic
  padding and Model Garden, per task (ratios of the median rounds' examples/s), and the
  serving rows' batch-1 latency."""
  saved = read(results_name)["results"]
  lines = ["| task (mean real length) | against our fixed length | against Hugging Face, dynamic "
           "padding | against Model Garden |", "| --- | ---: | ---: | ---: |"]
  for task, (length, rows) in _length_aware_by_task(saved["training"]).items():
    ours = _median_of(rows["ours"]["examples_per_second"])
    cells = [f"{ours / _median_of(rows[peer]['examples_per_second']):.2f}x"
             if peer in rows else "" for peer in ("ours_fixed", "hf_dynamic", "model_garden")]
    lines.append(_row((f"{LENGTH_AWARE_TASKS[task]} ({length})", *cells)))
  for row in saved["serving"]:
    if row["latency_ratio"]:
      lines.append(_row(("serving one short text (batch-1 latency)",
                         f"{_median_of(row['latency_ratio']):.2f}x lower", "", "")))
  return lines


def packed_row_gains(results_name):
  """README: packed rows per task: the real-token share of exact packing and of length buckets,
  exact against our buckets and against Hugging Face's dynamic padding, static against our fixed
  length (each the median of the round-by-round ratios)."""
  lines = ["| task (mean real length) | real tokens / positions: exact, buckets | exact vs our "
           "buckets | exact vs Hugging Face, dynamic padding | static vs our fixed length "
           "(TPU) |", "| --- | --- | --: | --: | --: |"]
  training = read(results_name)["results"]["training"]
  for task, (length, rows) in _length_aware_by_task(training).items():
    ratio = lambda key: (f"{_median_of(rows[key]['ratio']):.2f}x"
                         if key in rows and _median_of(rows[key]["ratio"]) else "")
    lines.append(_row((f"{LENGTH_AWARE_TASKS[task]} ({length})",
                       f"{_share_of(rows['ours_packed'])}, {_share_of(rows['ours'])}",
                       ratio("ours"), ratio("hf_dynamic"), ratio("ours_fixed"))))
  return lines


GROUPING_SCORES = {"author": (("eval_accuracy", "accuracy", 4),),
                   "squad": (("f1", "F1", 1), ("exact_match", "EM", 1))}


def grouping_accuracy(results_name):
  """Per task and setting: each seed's dev score, their mean and standard deviation. (The
  file's training examples/s are left out: the commands run on whatever cores are free, and
  length_aware.py measures the speed.)"""
  import grouping_accuracy as script  # pylint: disable=g-import-not-at-top
  saved = read(results_name)["results"]
  seeds = saved["settings"]["seeds"]
  lines = ["| task | setting | " + " | ".join(f"seed {s}" for s in seeds)
           + " | mean (sd) |", "| --- | --- |" + " --: |" * (len(seeds) + 1)]
  for task, runs in saved["runs"].items():
    scores = GROUPING_SCORES[task]
    for setting in saved["settings"]["settings"]:
      by_seed = {r["seed"]: r for r in runs if r["setting"] == setting}
      if not by_seed:
        continue
      mine = list(by_seed.values())
      cells = [" / ".join(f"{by_seed[seed][key]:.{digits}f}" for key, _, digits in scores)
               if seed in by_seed else "-" for seed in seeds]
      summary = []
      for key, _, digits in scores:
        column = [r[key] for r in mine]
        sd = statistics.stdev(column) if len(column) > 1 else 0.0
        summary.append(f"{statistics.mean(column):.{digits}f} ({sd:.{digits}f})")
      label = task + " (" + " / ".join(name for _, name, _ in scores) + ")"
      flags = " ".join(script.SETTINGS[setting])
      lines.append(f"| {label} | `{flags}` | " + " | ".join(cells) + " | "
                   + " / ".join(summary) + " |")
  return lines


# === Multiple choice (multiple_choice.py) ===

MULTIPLE_CHOICE_ROWS = {
    "ours": "ours, defaults (float32; {packing})",
    "ours_unpacked": "ours, `--packing=none`",
    "ours_bf16": "ours, `--mixed_precision=bfloat16`",
    "hf": "Hugging Face `BertForMultipleChoice`"}
MULTIPLE_CHOICE_PACKING = {"none": "`--packing=auto` leaves these batches unpacked",
                           "exact": "`--packing=auto` packs these batches' pairs into rows"}


def multiple_choice(results_name, packing=None):
  """Dev accuracy, training examples/s and the ratio to Hugging Face, medians over seeds (ours'
  rows say when they trained with --adam_bias_correction, Hugging Face's optimizer). Ours'
  default row says what --packing=auto chose: the runs' "packing" (files written before
  multiple_choice.py recorded it: `packing`, what those runs logged)."""
  saved = read(results_name)
  medians = saved["medians"]
  chosen = {run["packing"] for run in saved["runs"] if run["system"] == "ours"
            and "packing" in run} or {packing}
  if len(chosen) > 1 or None in chosen:
    raise ValueError(f"{results_name}: ours' runs chose --packing {sorted(map(str, chosen))}; "
                     "one mode per table")
  bias_correction = saved["settings"].get("adam_bias_correction", False)
  hf = medians.get("hf")
  lines = ["| system | dev accuracy | training examples/s | vs Hugging Face |",
           "| --- | --: | --: | --: |"]
  for system, label in MULTIPLE_CHOICE_ROWS.items():
    if system not in medians:
      continue
    label = label.format(packing=MULTIPLE_CHOICE_PACKING[next(iter(chosen))])
    if bias_correction and system != "hf":
      label = label.replace("ours, defaults (", "ours, `--adam_bias_correction` (") if (
          label.startswith("ours, defaults")) else f"{label} `--adam_bias_correction`"
    m = medians[system]
    ratio = (f"{m['examples_per_second'] / hf['examples_per_second']:.2f}x"
             if hf and system != "hf" else "")
    lines.append(f"| {label} | {m['accuracy']:.3f} | {m['examples_per_second']:.2f} | "
                 f"{ratio} |".replace("|  |", "| |"))
  return lines


def multiple_choice_seeds(*results_names, ours="ours"):
  """Seed by seed over the runs of one or more results files, ours against Hugging Face: each
  one's dev accuracy and the paired difference in points, then the medians, and the
  differences' mean with its standard error (their standard deviation over the square root of
  the seeds) and range."""
  by_seed = {}
  for name in results_names:
    for run in read(name)["runs"]:
      by_seed.setdefault(run["seed"], {})[run["system"]] = run
  pairs = [(seed, runs[ours], runs["hf"]) for seed, runs in sorted(by_seed.items())
           if ours in runs and "hf" in runs]
  lines = ["| seed | ours | Hugging Face | ours - Hugging Face (points) |",
           "| --- | --: | --: | --: |"]
  differences = []
  for seed, mine, theirs in pairs:
    differences.append(100 * (mine["accuracy"] - theirs["accuracy"]))
    lines.append(f"| {seed} | {mine['accuracy']:.3f} | {theirs['accuracy']:.3f} | "
                 f"{differences[-1]:+.1f} |")
  median = statistics.median
  lines.append(f"| median | {median([p[1]['accuracy'] for p in pairs]):.3f} | "
               f"{median([p[2]['accuracy'] for p in pairs]):.3f} | {median(differences):+.1f} |")
  if len(differences) > 1:
    error = statistics.stdev(differences) / len(differences) ** 0.5
    lines.append(f"| mean, its standard error; range | | | {statistics.mean(differences):+.1f} "
                 f"± {error:.1f}; {min(differences):+.1f} to {max(differences):+.1f} |")
  return lines


# === Time to quality (time_to_quality.py) ===

TTQ_PEERS = {"model_garden": "Model Garden", "hf": "Hugging Face"}
TTQ_GOALS = {"model_garden": 0.7, "hf": 0.85}
TTQ_TARGETS = {"final masked-LM accuracy": "final masked-LM accuracy",
               "halfway to it (masked-LM accuracy)": "halfway to it (accuracy)",
               "final eval masked-LM loss": "final eval masked-LM loss",
               "halfway to it (eval masked-LM loss)": "halfway to it (eval loss)"}


def time_to_quality_goals(results_name, ours="ours_adam_bc"):
  """The goal table of a run: per peer and target, the value, the minutes of the median curves,
  the ratio and its verdict, the seeds reaching it, and the ratio over seed resamples
  (curves.goal_rows and curves.ratio_spread, as the script prints them)."""
  by_system = {}
  for run in read(results_name)["runs"]:
    by_system.setdefault(run["system"], []).append(run)
  lines = ["| peer | target (the peer's, median) | value | the peer's minutes | ours' minutes | "
           "ratio | goal | seeds reaching it (peer, ours) | ratio over seed resamples: 5-95%, "
           "met in |", "| --- | --- | --: | --: | --: | --: | --- | --- | --- |"]
  for peer, label in TTQ_PEERS.items():
    if peer not in by_system:
      continue
    bound = TTQ_GOALS[peer]
    spread = curves.ratio_spread(by_system[peer], by_system[ours], bound)
    for row in curves.goal_rows(by_system[peer], by_system[ours], bound):
      low, high, share = spread[row["target"]]
      value = f"{row['value']:.4f}" if row["key"] == "accuracy" else f"{row['value']:.3f}"
      lines.append(
          f"| {label} | {TTQ_TARGETS[row['target']]} | {value} | {row['peer_minutes']:.2f} | "
          f"{row['ours_minutes']:.2f} | {row['ratio']:.2f} | <= {bound:g}: "
          f"{'met' if row['met'] else 'missed'} | {row['peer_seeds']}, {row['ours_seeds']} | "
          f"{low:.2f}-{high:.2f}, {share:.0%} |")
  return lines


# The runs with a results file, newest first: file -> the page's words for the run (what set it
# apart; the CPU, which the older files do not record).
TTQ_RUNS = {
    "time_to_quality_f32_6min_2026-12-05.json":
        "[the latest: pre-registered, ours with `--cpu_towers=2`, five seeds, 12 evaluations]"
        "(#the-latest-run), Intel Xeon",
    "time_to_quality_f32_towers_2026-12-05.json":
        "pre-registered, ours with `--cpu_towers=2`, 16 evaluations of 1,024 instances, Intel Xeon",
    "time_to_quality_f32_dense_2026-12-05.json":
        "pre-registered, 32 evaluations dense over the first minutes, Intel Xeon",
    "time_to_quality_f32_20points_2026-12-05.json":
        "pre-registered, 20 evaluations of 1,024 instances, Intel Xeon",
    "time_to_quality_f32_warmup300_2026-12-04.json":
        "pre-registered, against both peers, Intel Xeon",
    "time_to_quality_bf16_warmup300_2026-12-04.json": "pre-registered, mixed bfloat16, Intel Xeon",
    "time_to_quality_bf16_2026-12-04.json":
        "mixed bfloat16, a rerun stopped after four runs (ours' seed 2 on the plateau), Intel Xeon",
}


def _training_rate(runs):
  """Median examples/s on the training clock (the first step's batch excluded, as the script)."""
  return statistics.median((r["curve"][-1]["examples"] - r["batch_size"])
                           / r["curve"][-1]["seconds"] for r in runs)


def time_to_quality_runs(ours="ours_adam_bc"):
  """One row per run of TTQ_RUNS: precision and warmup, seeds and minutes, ours' examples/s over
  each peer's, and per peer the goals met with their ratios (final accuracy, halfway to it, final
  eval loss, halfway to it) and the share of seed resamples meeting each (curves.goal_rows and
  curves.ratio_spread, as the script prints them)."""
  lines = ["| run | precision, warmup | seeds, minutes per run | examples/s against Model "
           "Garden (Hugging Face) | against Model Garden (goal <= 0.7x) | in resamples | "
           "against Hugging Face (goal <= 0.85x) | in resamples |",
           "| --- | --- | --- | --: | --- | --- | --- | --- |"]
  for name, label in TTQ_RUNS.items():
    saved = read(name)
    by_system = {}
    for run in saved["runs"]:
      by_system.setdefault(run["system"], []).append(run)
    seeds = sorted(run["seed"] for run in by_system[ours])
    warmup = re.search(r"warmup (\d+)", saved["settings"]).group(1)
    precision = "float32" if saved["mixed_precision"] == "none" else saved["mixed_precision"]
    speed = " ".join(
        (f"{_training_rate(by_system[ours]) / _training_rate(by_system[peer]):.2f}x"
         if peer == "model_garden" else
         f"({_training_rate(by_system[ours]) / _training_rate(by_system[peer]):.2f}x)")
        for peer in TTQ_PEERS if peer in by_system)
    cells = [label, f"{precision}, {warmup}",
             f"{seeds[0]}-{seeds[-1]}, {saved['points'][-1] / 60:g}", speed]
    for peer in TTQ_PEERS:
      if peer not in by_system:
        cells += ["not run", ""]
        continue
      rows = curves.goal_rows(by_system[peer], by_system[ours], TTQ_GOALS[peer])
      spread = curves.ratio_spread(by_system[peer], by_system[ours], TTQ_GOALS[peer])
      met = sum(row["met"] for row in rows)
      verdict = f"{met} of {len(rows)}"
      cells.append((f"**{verdict}**" if met == len(rows) else verdict) + ": " + ", ".join(
          "-" if row["ratio"] is None else f"{row['ratio']:.2f}" for row in rows))
      cells.append(", ".join(f"{spread[row['target']][2]:.0%}" for row in rows))
    lines.append(("| " + " | ".join(cells) + " |").replace("|  |", "| |"))
  return lines


def _median_text(values, digits, bold=False, spread=True):
  text = f"{statistics.median(values):.{digits}f}"
  text = f"**{text}**" if bold else text
  if spread and min(values) != max(values):
    text += f" ({min(values):.{digits}f}-{max(values):.{digits}f})"
  return text


def time_to_quality_systems(results_name, labels, minutes, final_bold, steps_range):
  """Per system (labels: system -> the page's name, in order): steps in the budget, examples/s
  on the training clock, masked-LM accuracy at the given minutes (median; the last with the
  seeds' min-max) and eval loss at the last point, medians over seeds."""
  saved = read(results_name)
  points = [p / 60 for p in saved["points"]]
  indexes = [points.index(m) for m in minutes]
  lines = [f"| system | steps in {minutes[-1]:g} min | examples/s | masked-LM accuracy at "
           + " / ".join(f"{m:g}" for m in minutes) + f" min | eval loss at {minutes[-1]:g} min |",
           "| --- | --: | --: | --- | --: |"] if steps_range else [
               "| system | steps | examples/s | accuracy at " + " / ".join(
                   f"{m:.1f}" for m in minutes) + f" min | eval loss at {minutes[-1]:g} min |",
               "| --- | --: | --: | --- | --: |"]
  for system, label in labels.items():
    runs = [r for r in saved["runs"] if r["system"] == system]
    steps = [r["curve"][-1]["steps"] for r in runs]
    rate = statistics.median((r["curve"][-1]["examples"] - r["batch_size"])
                             / r["curve"][-1]["seconds"] for r in runs)
    accuracy = [_median_text([r["curve"][i]["accuracy"] for r in runs], 4, spread=False)
                for i in indexes[:-1]]
    accuracy.append(_median_text([r["curve"][indexes[-1]]["accuracy"] for r in runs], 4,
                                 bold=final_bold))
    loss = _median_text([r["curve"][indexes[-1]]["loss"] for r in runs], 3, bold=final_bold,
                        spread=False)
    lines.append(f"| {label} | {_median_text(steps, 0, spread=steps_range)} | {rate:.1f} | "
                 + " / ".join(accuracy) + f" | {loss} |")
  return lines


# === Distillation (distillation.py --goals) ===


def _seed_cells(values, digits):
  """Each seed's value (in seed order), then their median."""
  ordered = [value for _, value in sorted(values.items(), key=lambda kv: int(kv[0]))]
  return [f"{v:.{digits}f}" for v in ordered] + [f"{statistics.median(ordered):.{digits}f}"]


def distillation_runs(results_name):
  """Per setting: dev accuracy per seed and the median (the taggers: token accuracy, then
  entity F1), and the median seconds of the training phase."""
  rows = read(results_name)["rows"]
  seeds = sorted({row["seed"] for row in rows if row["seed"]})
  lines = ["| setting | steps | " + " | ".join(f"seed {s}" for s in seeds) + " | median | "
           "training phase, s (median) |", "| --- | --: |" + " --: |" * (len(seeds) + 2)]
  settings = list(dict.fromkeys(row["setting"] for row in rows))
  for setting in settings:
    runs = {row["seed"]: row for row in rows if row["setting"] == setting}
    metrics = [("eval_accuracy", "")] + ([("eval_f1", ", entity F1")]
                                         if "eval_f1" in next(iter(runs.values())) else [])
    for key, suffix in metrics:
      cells = _seed_cells({seed: row[key] for seed, row in runs.items()}, 3)
      if len(runs) == 1:  # a teacher: one run, its value under the median
        cells = ["-"] * len(seeds) + cells[-1:]
      steps = next(iter(runs.values()))["num_train_steps"]
      seconds = statistics.median(row["train_seconds"] for row in runs.values())
      lines.append(f"| {setting}{suffix} | {steps} | " + " | ".join(cells) +
                   f" | {seconds:.1f} |")
  return lines


def distillation_goals(results_name):
  """The goals: each measure per seed and its median against the goal (the script's functions,
  recomputed from the rows and the serving summary)."""
  import distillation  # pylint: disable=g-import-not-at-top
  saved = read(results_name)
  labelled = [int(n) for n in saved["args"]["labelled"].split(",")]
  accuracy = distillation.accuracy_goals(saved["rows"], labelled, saved["args"]["transfer"],
                                         saved["args"].get("augment", 0))
  cost = distillation.cost_goals(saved["rows"], labelled[-1])
  seeds = sorted((accuracy.get("retention") or accuracy["tagging_gain"])["per_seed"], key=int)
  lines = ["| goal | measure | " + " | ".join(f"seed {s}" for s in seeds)
           + " | median | verdict |", "| --- | --- |" + " --: |" * (len(seeds) + 1) + " --- |"]

  def add(goal, measure, entry, digits, op=">="):
    cells = _seed_cells(entry["per_seed"], digits)
    median, target = entry["median"], entry.get("goal")
    verdict = ""
    if target is not None:
      met = median >= target if op == ">=" else median <= target
      verdict = f"{op} {target:g}: {'met' if met else '**not met**'}"
    lines.append(f"| {goal} | {measure} | " + " | ".join(cells) + f" | {verdict} |")
  if "retention" in accuracy:  # the classifier rows
    add(">= 97% of the teacher", f"distilled / teacher dev accuracy "
        f"({accuracy['retention']['teacher']:.3f}), {labelled[-1]} labels",
        accuracy["retention"], 3)
    for size in labelled:
      add("+1.0 point, sentences", f"distilled - alone, dev accuracy, {size} labels",
          accuracy[f"gain_{size}"], 3)
  if "tagging_gain" in accuracy:
    twin = accuracy["tagging_gain"]["setting"].split(") ", 1)[1]
    add("+0.5 point, tokens", f"{twin} - alone, dev token accuracy", accuracy["tagging_gain"],
        4)
    add("", f"{twin} - alone, dev entity F1", accuracy["tagging_f1_gain"], 3)
    if "tagging_gain_without_transfer" in accuracy:
      extra = "copies" if twin.endswith(" copies") else "transfer sentences"
      add("", f"distilled without the {extra} - alone, dev token accuracy",
          accuracy["tagging_gain_without_transfer"], 4)
    retention = accuracy["tagging_retention"]
    add("", f"{twin} / tagger teacher dev token accuracy ({retention['teacher']:.3f})",
        retention, 3)
  names = dict(cached_with_cache_pass="cached: training phase + the teacher's pass / alone",
               cached_training_phase="cached: training phase / alone",
               uncached_training_phase="teacher in the step: training phase / alone",
               cached_steady_seconds_per_example="cached: seconds per example, second half / "
               "alone",
               uncached_steady_seconds_per_example="teacher in the step: seconds per example, "
               "second half / alone",
               cpu_cached_with_cache_pass="cached: CPU seconds of the training phase + the "
               "teacher's pass / alone",
               cpu_cached_with_teacher="cached: CPU seconds of the training phase + the "
               "teacher's pass + its loading and dev evaluation / alone",
               cpu_cached_training_phase="cached: CPU seconds of the training phase / alone",
               cpu_uncached_training_phase="teacher in the step: CPU seconds of the training "
               "phase / alone")
  for key, name in names.items():
    if key in cost:
      add("epoch <= 1.2x alone" if key.endswith("cached_with_cache_pass") else "", name,
          cost[key], 2, "<=")
  return [line.replace("|  |", "| |") for line in lines]


def distillation_phases(results_name):
  """Per student setting: the median over seeds of each phase's CPU seconds (the training phase,
  --cache_teacher's pass of the teacher, the teacher's loading and dev evaluation before
  training), as distillation.py's _phase_clock timed them."""
  rows = [row for row in read(results_name)["rows"] if row["seed"]]
  keys = ("train_cpu_seconds", "cache_cpu_seconds", "teacher_cpu_seconds")
  lines = ["| setting | training phase | the teacher's pass | the teacher's loading and dev "
           "evaluation | in all |", "| --- | --: | --: | --: | --: |"]
  for setting in dict.fromkeys(row["setting"] for row in rows):
    runs = [[row.get(key) or 0.0 for key in keys] for row in rows if row["setting"] == setting]
    medians = [statistics.median(column) for column in zip(*runs)]
    medians.append(statistics.median(sum(phases) for phases in runs))
    lines.append(f"| {setting} | " + " | ".join(f"{value:.2f}" for value in medians) + " |")
  return lines


def distillation_serving(results_name):
  """The teacher's and the student's exports, one thread: batch-1 p50 / p99 and batch-32
  examples/s on short and long text, then the student's speed over the teacher's."""
  import distillation  # pylint: disable=g-import-not-at-top
  serving_part = read(results_name)["serving"]
  summary = serving_part["summary"]
  lines = ["| export (one thread) | short: b1 p50 / p99 ms | short: b32 /s | long: b1 p50 / p99 "
           "ms | long: b32 /s |", "| --- | --: | --: | --: | --: |"]
  for row in serving_part["rows"]:
    cells = []
    for name in ("short", "long"):
      cell = summary[row][name]
      cells += [f"{cell['p50_ms']:.2f} / {cell['p99_ms']:.2f}", f"{cell['batch32_per_s']:.1f}"]
    lines.append(f"| {row} | " + " | ".join(cells) + " |")
  for kind, ratios in distillation.serving_goals(summary).items():
    lines.append(f"| student's speed / teacher's, {kind} | "
                 + " | ".join(f"{ratios[key]:.2f}x" for key in (
                     "short_b1_p50", "short_b32_per_s", "long_b1_p50", "long_b32_per_s"))
                 + " |")
  return lines


def distillation_sweep(results_name):
  """--sweep's twins per labelled size: each (alpha, T) pair's dev accuracy (median of seeds)
  and its gain over the twin alone, seed by seed and median; the flags' defaults marked."""
  saved = read(results_name)
  lines = []
  for labelled, entries in sorted(saved["sweep"].items(), key=lambda item: int(item[0])):
    seeds = list(entries[0]["per_seed"])
    if not lines:
      lines = ["| labelled | `--distill_alpha` : `--distill_temperature` | dev accuracy (median) | "
               + " | ".join(f"gain, seed {seed}" for seed in seeds) + " | gain (median) |",
               "| --: | --- | --: |" + " --: |" * (len(seeds) + 1)]
    for entry in entries:
      name = entry["pair"] + (" (the defaults)" if entry["defaults"] else "")
      gains = " | ".join(f"{entry['per_seed'][seed] * 100:+.1f}" for seed in seeds)
      lines.append(f"| {labelled} | {name} | {entry['accuracy']:.3f} | {gains} | "
                   f"{entry['median'] * 100:+.1f} |")
  return lines


# The --augment runs (distillation.py), in the table's row order: (results file, its task's name).
DISTILLATION_AUGMENT = (
    ("distillation_augment_source_48x4_2026-12-07.json", "three corpora"),
    ("distillation_augment_source_48_2026-12-07.json", "three corpora"),
    ("distillation_augment_source_48x20_2026-12-07.json", "three corpora"),
    ("distillation_augment_source_360_2026-12-07.json", "three corpora"),
    ("distillation_augment_source_360x20_2026-12-07.json", "three corpora"),
    ("distillation_augment_books_2026-12-07.json", "eight books"),
)


def distillation_augment():
  """Per --augment run: the twins' dev accuracy (medians of the seeds) at the same steps, and
  the twin with copies' gain over the twin alone and over the twin distilled without copies,
  seed by seed and median (distillation.augment_gains)."""
  import distillation  # pylint: disable=g-import-not-at-top
  lines = ["| task, labelled | copies a sentence | steps | seeds | alone | distilled | distilled "
           "with copies | with copies - alone, per seed | median | with copies - distilled, per "
           "seed | median |", "| --- |" + " --: |" * 10]
  for name, task in DISTILLATION_AUGMENT:
    saved = read(name)
    labelled, augment = int(saved["args"]["labelled"]), saved["args"]["augment"]
    found = distillation.augment_gains(saved["rows"], labelled, augment)
    seeds = sorted(found["copies"]["per_seed"], key=int)

    def points(entry):
      return (", ".join(f"{entry['per_seed'][seed] * 100:+.1f}" for seed in seeds),
              f"{entry['median'] * 100:+.1f}")
    over_alone, over_distilled = points(found["over_alone"]), points(found["over_distilled"])
    lines.append(
        f"| {task}, {labelled} | {augment} | {', '.join(map(str, found['steps']))} | "
        f"{len(seeds)} | {found['alone']['median']:.3f} | {found['distilled']['median']:.3f} | "
        f"{found['copies']['median']:.3f} | {over_alone[0]} | {over_alone[1]} | "
        f"{over_distilled[0]} | {over_distilled[1]} |")
  return lines


# === The main job (main_job.py), quoted in README.md ===


def main_job(results_name):
  import main_job as script  # pylint: disable=g-import-not-at-top
  return [line for line in script.table(read(results_name)).splitlines() if line.startswith("|")]


# Distillation results files (distillation.py) by their tables' marker prefix, and whether the
# run timed the exports (--serving): each gives PREFIX_runs_DATE and PREFIX_goals_DATE, and with
# --serving PREFIX_serving_DATE.
DISTILLATION_RESULTS = {
    "distillation": ("distillation_goals_2026-12-07.json", True),
    "distillation_cost": ("distillation_cost_serving_2026-12-06.json", True),
    "distillation_cache_pass": ("distillation_cache_pass_2026-12-06.json", False),
    "distillation_books": ("distillation_books_2026-12-06.json", False),
    "distillation_books_5epochs": ("distillation_books_5epochs_2026-12-06.json", False),
    "distillation_tagging": ("distillation_tagging_2026-12-06.json", False),
    "distillation_tagging_100": ("distillation_tagging_100_2026-12-06.json", False),
    "distillation_tagging_augment": ("distillation_tagging_augment_2026-12-07.json", False),
}


def _distillation_tables():
  tables = {}
  for prefix, (name, timed) in DISTILLATION_RESULTS.items():
    date = name.rsplit("_", 1)[1][:-len(".json")]
    tables[f"{prefix}_runs_{date}"] = functools.partial(distillation_runs, name)
    tables[f"{prefix}_goals_{date}"] = functools.partial(distillation_goals, name)
    if timed:
      tables[f"{prefix}_serving_{date}"] = functools.partial(distillation_serving, name)
  return tables


# Marker name -> the lines of its table.
TABLES = {
    **_distillation_tables(),
    "distillation_augment_2026-12-07": distillation_augment,
    "distillation_sweep_books_2026-12-07": lambda: distillation_sweep(
        "distillation_sweep_books_2026-12-07.json"),
    "distillation_sweep_transfer_2026-12-07": lambda: distillation_sweep(
        "distillation_sweep_transfer_2026-12-07.json"),
    "distillation_sweep_source_2026-12-07": lambda: distillation_sweep(
        "distillation_sweep_source_2026-12-07.json"),
    "distillation_cache_pass_phases_2026-12-06": lambda: distillation_phases(
        "distillation_cache_pass_2026-12-06.json"),
    "serving_peers_2026-12-07": lambda: serving_figures("serving_peers_2026-12-07.json"),
    "serving_ratios_2026-12-07": lambda: serving_ratios("serving_peers_2026-12-07.json"),
    "serving_summary_2026-12-07": lambda: serving_summary("serving_peers_2026-12-07.json"),
    "serving_goals_2026-12-07": lambda: serving_goals("serving_peers_2026-12-07.json"),
    "serving_tails_2026-12-07": lambda: serving_tails("serving_peers_2026-12-07.json"),
    "pretraining_data_2026-12-06": lambda: pretraining_data("pretraining_data_2026-12-06.json"),
    "tokenization_2026-12-06": lambda: tokenization("tokenization_2026-12-06.json"),
    "extract_features_2026-12-06": lambda: extract_features("extract_features_2026-12-06.json"),
    "multiple_choice_2026-12-07_128": lambda: multiple_choice(
        "multiple_choice_2026-12-07_128.json", packing="exact"),
    "multiple_choice_2026-12-06_speed_rounded": lambda: multiple_choice(
        "multiple_choice_2026-12-06_speed_rounded.json", packing="none"),
    "multiple_choice_2026-12-06_accuracy": lambda: multiple_choice_seeds(
        "multiple_choice_2026-12-06_accuracy.json",
        "multiple_choice_2026-12-06_accuracy_seed3.json"),
    "time_to_quality_goals_f32_6min_2026-12-05": lambda: time_to_quality_goals(
        "time_to_quality_f32_6min_2026-12-05.json"),
    "time_to_quality_systems_f32_6min_2026-12-05": lambda: time_to_quality_systems(
        "time_to_quality_f32_6min_2026-12-05.json",
        {"ours_adam_bc": "ours `--adam_bias_correction --cpu_towers=2`",
         "model_garden": "Model Garden BertPretrainerV2"}, (2, 3, 4, 5, 6), True, True),
    "time_to_quality_systems_default_2026-12-05": lambda: time_to_quality_systems(
        "time_to_quality_default_2026-12-05.json",
        {"ours": "ours (`run_pretraining` defaults)", "ours_dynamic": "ours `--dynamic_masking`",
         "ours_lamb": "ours `--optimizer=lamb`, batch 128",
         "model_garden": "Model Garden BertPretrainerV2",
         "hf": "Hugging Face BertForPreTraining (gathered)",
         "hf_mlm": "Hugging Face `run_mlm` way (masked LM only)"}, (1.5, 2.0, 2.5), False, False),
    "time_to_quality_runs": time_to_quality_runs,
    "finetuning_2026-12-06": lambda: measurements(
        "finetuning_2026-12-06.json", "examples/s", "ours / this"),
    "grouping_accuracy_2026-12-06": lambda: grouping_accuracy("grouping_accuracy_2026-12-06.json"),
    "grouping_accuracy_static_2026-12-06": lambda: grouping_accuracy(
        "grouping_accuracy_static_2026-12-06.json"),
    "model_step_2026-12-06": lambda: model_step("model_step_2026-12-06.json"),
    "pretraining_2026-12-06": lambda: pretraining("pretraining_2026-12-06.json"),
    "packed_pretraining_2026-12-06": lambda: packed_pretraining(
        "packed_pretraining_2026-12-06.json"),
    "packed_pretraining_readme_2026-12-06": lambda: packed_pretraining(
        "packed_pretraining_2026-12-06.json"),
    "length_aware_2026-12-06": lambda: length_aware("length_aware_2026-12-06.json"),
    "length_aware_serving_2026-12-06": lambda: length_aware_serving(
        "length_aware_2026-12-06.json"),
    "length_bucket_gains_2026-12-06": lambda: length_bucket_gains("length_aware_2026-12-06.json"),
    "packed_row_gains_2026-12-06": lambda: packed_row_gains("length_aware_2026-12-06.json"),
    "squad_2026-12-06": lambda: measurements(
        "squad_2026-12-06.json", "examples/s (data step: questions/s)", "ratio"),
    "main_job_2026-12-07_128lines": lambda: main_job("main_job_2026-12-07_128lines.json"),
}


def render_page(text: str, tables=None):
  """(The page with every marked table rendered, [names of its marked tables]); raises
  ValueError naming a marker without a table."""
  tables = TABLES if tables is None else tables
  names = []

  def replace(match):
    name = match.group("name")
    if name not in tables:
      raise ValueError(f"<!-- table: {name} -->: no such table in benchmarks/render.py "
                       f"(known: {', '.join(sorted(tables))})")
    names.append(name)
    return f"<!-- table: {name} -->\n" + "\n".join(tables[name]()) + "\n<!-- end table -->"
  return MARKER.sub(replace, text), names


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--check", action="store_true",
                      help="change nothing; exit 1 if a page differs from its rendering")
  args = parser.parse_args(argv)
  found, differ = [], []
  for page in PAGES:
    with open(page, encoding="utf-8") as f:
      text = f.read()
    rendered, names = render_page(text)
    found += names
    if rendered != text:
      differ.append(os.path.relpath(page, REPO_ROOT))
      if not args.check:
        with open(page + ".tmp", "w", encoding="utf-8") as f:
          f.write(rendered)
        os.replace(page + ".tmp", page)
  missing = sorted(set(TABLES) - set(found))
  if missing:
    sys.exit(f"tables no page marks: {', '.join(missing)}")
  if args.check and differ:
    sys.exit(f"not as rendered from benchmarks/results: {', '.join(differ)} (run python "
             "benchmarks/render.py)")
  print(("rendered " if not args.check else "checked ") + f"{len(found)} tables"
        + (f"; rewrote {', '.join(differ)}" if differ and not args.check else ""))
  return 0


if __name__ == "__main__":
  main()
