"""create_pretraining_data: the Beam pipeline on the DirectRunner against the local mode.

Builds a corpus of --size_mb MB from the input files (repeating them if they are smaller: each
repetition is new documents to the algorithm), then runs `data_prep/create_pretraining_data.py`
on it as a subprocess twice in one go: the local mode (--num_workers worker processes) and the
Beam pipeline (--runner=DirectRunner --direct_running_mode=multi_processing
--direct_num_workers=N). Prints, per run: instances, wall seconds, instances/s, CPU seconds
(the process and its descendants), peak RSS of the whole process tree (sampled with psutil)
and of the largest process (getrusage of the children), then the ratio Beam / local (Beam's
overhead). Both runs make the same multiset of records (checked when --check is given).

Usage (from the repository root):
  python benchmarks/beam_pretraining_data.py --size_mb=20

(the repository's English corpora and the bert-base-uncased vocab by default, as
benchmarks/pretraining_data.py). The rows go to benchmarks/results/beam_pretraining_data_DATE.json
(benchmarks/results_file.py); --smoke runs both on 0.02 MB of tests/data/cpd_austen_100k.txt
(dupe_factor 1, one worker, one shard, --check) in a temporary folder.
"""

import argparse
import glob
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pretraining_data as base  # pylint: disable=g-import-not-at-top,wrong-import-position
import results_file  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO_ROOT = base.REPO_ROOT


def run(args, corpus, out_dir, beam):
  """One run of the command, measured as benchmarks/pretraining_data.py measures (run_once).

  run_once names one --output_file; the command gets --output_dir and shards instead.
  """
  extra = [f"--output_dir={out_dir}", f"--num_output_shards={args.num_output_shards}"]
  if beam:
    extra += ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
              f"--direct_num_workers={args.num_workers}"]
  else:
    extra += [f"--num_workers={args.num_workers}"]
  real_popen = base.subprocess.Popen

  def popen(command, **kwargs):
    command = [c for c in command if not c.startswith("--output_file=")] + extra
    return real_popen(command, **kwargs)

  base.subprocess.Popen = popen
  try:
    return base.run_once(args, corpus, "", reference=False, seed=args.random_seed)
  finally:
    base.subprocess.Popen = real_popen


def records_of(folder):
  sys.path.insert(0, REPO_ROOT)
  from bert_tf.data import writer  # pylint: disable=g-import-not-at-top
  found = []
  for name in sorted(os.listdir(folder)):
    if writer.SHARD_PATTERN.match(name):
      found += writer.iter_records(os.path.join(folder, name))
  return sorted(found)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--input_files", default=base.DEFAULT_INPUTS,
                      help="Comma-separated files or globs, concatenated (and repeated).")
  parser.add_argument("--vocab_file",
                      default=base.corpora.VOCAB_FILE)
  parser.add_argument("--size_mb", type=float, default=20)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--max_predictions_per_seq", type=int, default=20)
  parser.add_argument("--dupe_factor", type=int, default=5)
  parser.add_argument("--random_seed", type=int, default=12345)
  parser.add_argument("--num_workers", type=int, default=2,
                      help="Local --num_workers and Beam's --direct_num_workers.")
  parser.add_argument("--num_output_shards", type=int, default=4)
  parser.add_argument("--check", action="store_true",
                      help="Also check that both runs made the same multiset of records.")
  parser.add_argument("--work_dir", default="")
  results_file.add_arguments(parser)
  args = parser.parse_args()
  if args.smoke:
    args.input_files, args.size_mb, args.dupe_factor = base.corpora.AUSTEN_100K, 0.02, 1
    args.num_workers, args.num_output_shards, args.check = 1, 1, True

  input_files = base.expand_inputs(args.input_files)
  work = args.work_dir or tempfile.mkdtemp(prefix="beam_bench_")
  os.makedirs(work, exist_ok=True)
  corpus = os.path.join(work, f"corpus_{args.size_mb:g}mb.txt")
  size = base.build_corpus(input_files, args.size_mb, corpus, repeat=True)
  print(f"corpus {size / 1e6:.1f} MB, cpu cores {os.cpu_count()}, load average "
        f"{os.getloadavg()[0]:.1f}, dupe_factor {args.dupe_factor}, max_seq_length "
        f"{args.max_seq_length}, {args.num_workers} workers, work_dir {work}", flush=True)

  results = {}
  for name, beam in (("local mode", False), ("Beam DirectRunner", True)):
    out = os.path.join(work, name.split()[0].lower())
    for leftover in glob.glob(os.path.join(out, "*")):
      os.remove(leftover)
    results[name] = run(args, corpus, out, beam)
    print(f"  {name}: {results[name]['instances']:,.0f} instances in "
          f"{results[name]['wall']:.1f} s", flush=True)

  print()
  print("| run | instances | wall s | instances/s | CPU s | process tree peak MB | "
        "largest process MB |")
  print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
  for name, r in results.items():
    print(f"| {name} | {r['instances']:,.0f} | {r['wall']:.1f} | {r['instances_per_s']:,.0f} "
          f"| {r['cpu']:.1f} | {r['tree_rss_mb']:,.0f} | {r['max_rss_mb']:,.0f} |")
  local, beam = results["local mode"], results["Beam DirectRunner"]
  print()
  print(f"Beam / local: wall {beam['wall'] / local['wall']:.2f}x, instances/s "
        f"{beam['instances_per_s'] / local['instances_per_s']:.2f}x, CPU "
        f"{beam['cpu'] / local['cpu']:.2f}x, tree memory "
        f"{beam['tree_rss_mb'] / max(local['tree_rss_mb'], 1):.2f}x")
  same = None
  if args.check:
    same = records_of(os.path.join(work, "local")) == records_of(os.path.join(work, "beam"))
    print(f"same multiset of records: {same}")
    if not same:
      raise SystemExit(1)
  results_file.write("beam_pretraining_data", dict(
      settings=dict(size_mb=args.size_mb, actual_mb=size / 1e6, dupe_factor=args.dupe_factor,
                    max_seq_length=args.max_seq_length, num_workers=args.num_workers,
                    num_output_shards=args.num_output_shards),
      runs=results, beam_over_local_wall=beam["wall"] / local["wall"], same_records=same),
      args.smoke, args.results_file)


if __name__ == "__main__":
  main()
