"""``dpsense experiment paper1|paper2|paper3|paper4|verify|dcs|families|faults``: the papers' reproductions,
and the correction on data families and sensor faults it was not built for."""
from __future__ import annotations

import argparse

from dpsense.cloud.cli.commands.common import examples, parse_floats, parse_ints


def parser_experiment(p: argparse.ArgumentParser) -> None:
    p.epilog = examples("dpsense experiment paper1 --n 20000 --runs 2 --out out/paper1",
                        "dpsense experiment paper4 --scenario 1")
    sub = p.add_subparsers(dest="experiment", metavar="NAME", required=True)
    e = sub.add_parser("paper1", help="paper 1, Fig. 3: recall and subset size of each correction mode",
                       description="Reproduce paper 1, Fig. 3 (Böhler et al. 2017, Sect. 7) over several seeds with the baselines, "
                                   "the 2017 reconstruction and every correction mode (paper, bands, secure); writes results.md, "
                                   "runs.csv and paper1.png.",
                       epilog=examples("dpsense experiment paper1",
                                       "dpsense experiment paper1 --n 20000 --seeds 1,2 --separations 220,400 "
                                       "--epsilons 0.1,0.5 --mode paper"))
    e.add_argument("--separations", type=parse_floats, default=(50.0, 120.0, 220.0, 400.0),
                   help="comma-separated separations (default 50,120,220,400)")
    e.add_argument("--epsilons", type=parse_floats, default=(0.1, 0.5, 1.0),
                   help="comma-separated epsilons per column (default 0.1,0.5,1)")
    e.add_argument("--seeds", type=parse_floats, default=(7, 13, 21, 34, 55),
                   help="comma-separated data seeds; each has its reference seed + 1000 (default 7,13,21,34,55: "
                        "reporting seeds; 1-5 chose the parameters)")
    e.add_argument("--runs", type=int, default=1, help="noise runs per seed and setting (default 1)")
    e.add_argument("--n", type=int, default=100_000, help="points per data set (default 100000)")
    e.add_argument("--shape", choices=("scale", "shift"), default="scale",
                   help="outlier generator, Böhler et al. 2017, Sect. 7 (default scale)")
    e.add_argument("--server", choices=("deployed", "exact"), default="deployed",
                   help="the correction server of modes paper, bands and secure: deployed (honest-round noise "
                        "on d_diff, as dpsense correction-server; default) or exact (idealised: the exact d_diff, "
                        "labelled so in the tables)")
    e.add_argument("--mode", choices=("paper", "bands", "secure"), default="bands",
                   help="the correction mode whose targets are checked (default bands); the tables show every mode")
    e.add_argument("--circuit-checks", type=int, default=1,
                   help="mode secure: on the windows of this many seeds per separation and epsilon, run the "
                        "two-party garbled circuit (seconds per 100,000 rows) and check that its R equals the "
                        "predicate's, which gives mode secure's rows (default 1; 0 = none)")
    e.add_argument("--alpha", type=float, default=0.005,
                   help="mode paper: bound on P(d_diff > tau) for any row (default 0.005)")
    e.add_argument("--skip-margin", type=float, default=0.05,
                   help="mode paper: no round when |O'| is within this share of the expected outlier count "
                        "(default 0.05)")
    e.add_argument("--band-width", type=float,
                   help="mode bands: band width in data units (default: half the reference's border)")
    e.add_argument("--sensitivity", choices=("shorth", "percentile"), default="shorth",
                   help="relaxed sensitivity from the reference: narrowest 90 %% range (default) or the "
                        "paper's 95th - 5th percentile")
    e.add_argument("--split", choices=("otsu", "trimmed_gap", "gap"), default="otsu",
                   help="2017 reconstruction: FP/TP split of line 3 (default otsu)")
    e.add_argument("--no-guard", dest="guard", action="store_false",
                   help="2017 reconstruction: accept every FP/TP split (default: only clearly bimodal ones)")
    e.add_argument("--kappa-sep", type=float, default=3.0,
                   help="2017 reconstruction, guard: class means this many pooled sds apart (default 3; 0 = off)")
    e.add_argument("--kappa-gap", type=float, default=0.0,
                   help="2017 reconstruction, guard: gap above this many median spacings (default 0 = off)")
    e.add_argument("--bound", choices=("R1", "R2", "R3"), default="R1",
                   help="2017 reconstruction: upper bound of FN_L3 (Böhler et al. 2017, Sect. 6; default R1)")
    e.add_argument("--dbscan-eps", type=float, default=12.0, help="DBSCAN eps in data units (default 12)")
    e.add_argument("--dbscan-min-samples", type=int,
                   help="DBSCAN min_samples (default: calibrated per separation on the reference)")
    e.add_argument("--out", default="out/paper1", help="output directory (default out/paper1)")
    ed = sub.add_parser("dcs", help="what noise on d_diff (epsilon_A, epsilon_cs) costs paper 1's correction",
                        description="Recall and subset of modes bands and paper on paper 1's windows with the exact "
                                    "d_diff, with the correction server's noise towards the analyst (epsilon_A) and "
                                    "with the board's epsilon_cs as well; prints a markdown table "
                                    "(docs/privacy.md).",
                        epilog=examples("dpsense experiment dcs",
                                        "dpsense experiment dcs --n 20000 --seeds 1 --epsilon-cs 1,0.5"))
    ed.add_argument("--separations", type=parse_floats, default=(220.0, 400.0),
                    help="comma-separated separations (default 220,400)")
    ed.add_argument("--epsilons", type=parse_floats, default=(0.1, 0.5, 1.0),
                    help="comma-separated epsilons per column (default 0.1,0.5,1)")
    ed.add_argument("--seeds", type=parse_floats, default=(1, 2, 3), help="comma-separated data seeds (default 1,2,3)")
    ed.add_argument("--n", type=int, default=100_000, help="points per data set (default 100000)")
    ed.add_argument("--epsilon-a", type=float, default=1.0,
                    help="the correction server's epsilon towards the analyst (default 1)")
    ed.add_argument("--epsilon-cs", type=parse_floats, default=(1.0, 0.5),
                    help="comma-separated board epsilon_cs values (default 1,0.5)")
    ed.add_argument("--epsilon-cs-aware", type=parse_floats, default=(1.0, 2.0, 3.0),
                    help="comma-separated board epsilon_cs values the correction server's rules know "
                         "(its thresholds move by both noises' margin; default 1,2,3)")
    ef = sub.add_parser("families", help="recall and subset per data family: O', mode bands, the default with "
                                         "the model-fit check",
                        description="The deployed path in-process on each data family (cloud/sim/families.py): "
                                    "O', mode bands from honest-round noise, and the default (bands where the "
                                    "model fits, O' where not); prints a markdown table (docs/accuracy.md).",
                        epilog=examples("dpsense experiment families",
                                        "dpsense experiment families --seeds 1,2,3,4,5 --n 3000"))
    ef.add_argument("--seeds", type=parse_floats, default=(7, 13, 21),
                    help="comma-separated data seeds (default 7,13,21: reporting seeds; 1-5 chose the thresholds)")
    ef.add_argument("--epsilons", type=parse_floats, default=(0.5, 1.0, 2.0),
                    help="comma-separated epsilons per column (default 0.5,1,2)")
    ef.add_argument("--n", type=int, default=20_000, help="points per window (default 20000)")
    ef.add_argument("--families", default=None,
                    help="comma-separated families of cloud/sim/families.py (default all)")
    ex = sub.add_parser("faults", help="recall per sensor-fault type on the simulated sensor fleet: O', each "
                                       "correction mode as deployed, the default",
                        description="The deployed path in-process on the simulated sensor fleet "
                                    "(cloud/sim/sensors.py): recall per fault type, subset and precision of O', "
                                    "modes paper, bands and secure from honest-round noise, and the default "
                                    "(bands where the model fits, O' where not); prints a markdown table "
                                    "(docs/accuracy.md).",
                        epilog=examples("dpsense experiment faults", "dpsense experiment faults --seeds 7 --n 5000"))
    ex.add_argument("--seeds", type=parse_floats, default=(7, 13, 21),
                    help="comma-separated data seeds (default 7,13,21: reporting seeds; 1 and 2 chose the "
                         "experiment's settings)")
    ex.add_argument("--epsilons", type=parse_floats, default=(0.5, 1.0, 2.0),
                    help="comma-separated epsilons per column (default 0.5,1,2)")
    ex.add_argument("--n", type=int, default=20_000, help="readings per window (default 20000)")
    ex.add_argument("--devices", type=int, default=20, help="sensors in the fleet (default 20)")
    e3 = sub.add_parser("paper3", help="paper 3 on Adult: DP-PCA error vs LAP/EXP, DP-LDA accuracy and AUC",
                        description="Reproduce paper 3 (Jiang et al. 2013, experiments) on UCI Adult; writes results.md, runs.csv and "
                                    "paper3.png. The defaults take about a minute; --full uses the paper's sizes.",
                        epilog=examples("dpsense experiment paper3", "dpsense experiment paper3 --full"))
    e3.add_argument("--epsilons", type=parse_floats, default=(0.1, 0.25, 0.5, 1.0, 1.25, 1.5),
                    help="comma-separated epsilons (default 0.1,0.25,0.5,1,1.25,1.5)")
    e3.add_argument("--ks", type=parse_floats, default=tuple(range(1, 11)), help="comma-separated k (default 1..10)")
    e3.add_argument("--trials", type=int, default=3, help="trials averaged (default 3)")
    e3.add_argument("--n", type=int, default=None, help="use a random subset of this many Adult rows (default all)")
    e3.add_argument("--lda-synthetic", type=int, default=5000,
                    help="synthetic records per DP-LDA run (default 5000; 0 = as many as training rows)")
    e3.add_argument("--full", action="store_true",
                    help="paper sizes: 10 trials and as many synthetic records as training rows")
    e3.add_argument("--out", default="out/paper3", help="output directory (default out/paper3)")
    e3.add_argument("--seed", type=int, default=1, help="seed of splits and noise (default 1)")
    e4 = sub.add_parser("paper4", help="paper 4, Figs. 3-7: DP outlier counts (1) and top-h subspaces (2)",
                        description="Reproduce paper 4 (Okada et al. 2015, experiments): --scenario 1 (noise std-dev of the count, "
                                    "smooth vs global) or 2 (precision/recall of the top-h subspaces); writes "
                                    "scenarioN.md and scenarioN.png. Paper-mode columns are labelled NOT DP.",
                        epilog=examples("dpsense experiment paper4 --scenario 1",
                                        "dpsense experiment paper4 --scenario 2 --hs 1,2,3 --runs 200"))
    e4.add_argument("--scenario", type=int, choices=(1, 2), required=True, help="1 or 2")
    e4.add_argument("--epsilons", type=parse_floats, default=None,
                    help="comma-separated epsilons (default 0.1..0.9 for 1, 0.2,0.4,0.8,1.6,3.2 for 2)")
    e4.add_argument("--hs", type=parse_floats, default=(1, 2, 3, 4, 5), help="scenario 2: values of h (default 1..5)")
    e4.add_argument("--draws", type=int, default=3, help="data draws averaged (default 3)")
    e4.add_argument("--runs", type=int, default=1000, help="scenario 2: selections per cell and draw (default 1000)")
    e4.add_argument("--full", action="store_true", help="paper-size averaging: 20 draws (overrides --draws)")
    e4.add_argument("--adult-positive", choices=(">50K", "<=50K"), default=">50K",
                    help="Adult label taken as inliers (default >50K, Okada et al. 2015, experiments)")
    e4.add_argument("--out", default="out/paper4", help="output directory (default out/paper4)")
    e4.add_argument("--seed", type=int, default=1, help="seed of data and selections (default 1)")
    e2 = sub.add_parser("paper2", help="paper 2: DP vs sensitively private (beta, r)-anomaly identification",
                        description="Accuracy of the DP and (epsilon, k)-SP anomaly identification queries on "
                                    "anomalies and normal records (Asif et al. 2019, experiments); writes results.md, rows.csv and "
                                    "paper2.png.",
                        epilog=examples("dpsense experiment paper2",
                                        "dpsense experiment paper2 --datasets synthetic --epsilons 0.5,1"))
    e2.add_argument("--datasets", default="synthetic,ionosphere",
                    help="comma-separated: synthetic, ionosphere (default both)")
    e2.add_argument("--epsilons", type=parse_floats, default=(0.01, 0.1, 0.5, 1.0, 2.0),
                    help="comma-separated epsilons (default 0.01,0.1,0.5,1,2)")
    e2.add_argument("--ks", type=parse_floats, default=(1, 3), help="comma-separated k of the SP mechanism (default 1,3)")
    e2.add_argument("--beta", type=int, default=5, help="anomaly threshold beta (default 5)")
    e2.add_argument("--anomaly-share", type=float, default=0.05,
                    help="r is set so that about this share of records are anomalies (default 0.05)")
    e2.add_argument("--n", type=int, default=2000, help="synthetic records (default 2000)")
    e2.add_argument("--out", default="out/paper2", help="output directory (default out/paper2)")
    e2.add_argument("--seed", type=int, default=1, help="seed of data and answers (default 1)")
    ev = sub.add_parser("verify", help="paper 1 + 2: verify the corrected candidate set with SP anomaly queries",
                        description="Run the paper-1 correction protocol on one window per seed, then answer an "
                                    "(epsilon, k)-SP (beta, r)-anomaly query per candidate; writes results.md.",
                        epilog=examples("dpsense experiment verify", "dpsense experiment verify --n 20000 --ks 1,5",
                                        "dpsense experiment verify --candidates reconstruction --sensitivity percentile "
                                        "--dbscan-min-samples 12"))
    ev.add_argument("--n", type=int, default=20_000, help="points in the window (default 20000)")
    ev.add_argument("--separation", type=float, default=220.0, help="paper-1 separation (default 220)")
    ev.add_argument("--epsilon-ldp", type=float, default=0.5, help="local epsilon per column (default 0.5)")
    ev.add_argument("--dbscan-eps", type=float, default=12.0, help="DBSCAN eps = r (default 12)")
    ev.add_argument("--dbscan-min-samples", type=int, default=None,
                    help="DBSCAN min_samples; beta = min_samples - 1 (default: calibrated per separation on the "
                         "reference, as in paper 1)")
    ev.add_argument("--candidates", choices=("bands", "paper", "reconstruction"), default="bands",
                    help="correction protocol that produces R (default bands, paper 1's headline mode)")
    ev.add_argument("--sensitivity", choices=("shorth", "percentile"), default="shorth",
                    help="relaxed sensitivity from the reference (default shorth, as paper 1)")
    ev.add_argument("--seeds", type=parse_floats, default=(1, 2, 3, 4, 5), help="comma-separated seeds (default 1,2,3,4,5)")
    ev.add_argument("--no-ceiling", action="store_true", help="skip the (beta, r) grid of the ceiling table")
    ev.add_argument("--epsilons", type=parse_floats, default=(0.1, 0.5, 1.0),
                    help="comma-separated epsilons of the anomaly queries (default 0.1,0.5,1)")
    ev.add_argument("--ks", type=parse_floats, default=(1, 5), help="comma-separated k (default 1,5)")
    ev.add_argument("--out", default="out/verify", help="output directory (default out/verify)")


def _do_paper2(args: argparse.Namespace) -> int:
    from dpsense.cloud.sim.experiments.paper2 import Paper2Config, main
    cfg = Paper2Config(datasets=tuple(d.strip() for d in args.datasets.split(",") if d.strip()),
                       epsilons=args.epsilons, ks=parse_ints("--ks", args.ks), beta=args.beta,
                       anomaly_share=args.anomaly_share, n_synthetic=args.n, seed=args.seed)
    return main(cfg, args.out)


def _do_verify(args: argparse.Namespace) -> int:
    from dpsense.cloud.sim.experiments.verify import VerifyConfig, main
    cfg = VerifyConfig(n=args.n, separation=args.separation, epsilon_ldp=args.epsilon_ldp,
                       dbscan_eps=args.dbscan_eps, dbscan_min_samples=args.dbscan_min_samples,
                       candidates=args.candidates, sensitivity=args.sensitivity, epsilons=args.epsilons,
                       ks=parse_ints("--ks", args.ks), seeds=parse_ints("--seeds", args.seeds),
                       ceiling=not args.no_ceiling)
    return main(cfg, args.out)


def _do_paper3(args: argparse.Namespace) -> int:
    from dpsense.cloud.sim.experiments.paper3 import Paper3Config, main
    synth = None if args.full or args.lda_synthetic == 0 else args.lda_synthetic
    cfg = Paper3Config(epsilons=args.epsilons, ks=parse_ints("--ks", args.ks), trials=10 if args.full else args.trials,
                       n=args.n, lda_synthetic=synth, seed=args.seed)
    return main(cfg, args.out)


def _do_paper4(args: argparse.Namespace) -> int:
    from dpsense.cloud.errors import UsageError
    from dpsense.cloud.sim.experiments.paper4 import Paper4Config, main
    if any(h != int(h) for h in args.hs):
        raise UsageError("--hs must be integers")
    cfg = Paper4Config(scenario=args.scenario, epsilons=args.epsilons or (), hs=tuple(int(h) for h in args.hs),
                       draws=20 if args.full else args.draws, runs=args.runs,
                       adult_positive=args.adult_positive, seed=args.seed)
    return main(cfg, args.out)


def do_experiment(args: argparse.Namespace) -> int:
    if args.experiment == "paper4":
        return _do_paper4(args)
    if args.experiment == "paper2":
        return _do_paper2(args)
    if args.experiment == "verify":
        return _do_verify(args)
    if args.experiment == "paper3":
        return _do_paper3(args)
    if args.experiment == "dcs":
        return _do_dcs(args)
    if args.experiment == "families":
        return _do_families(args)
    if args.experiment == "faults":
        return _do_faults(args)
    from dpsense.cloud.sim.experiments.paper1 import Paper1Config, main
    cfg = Paper1Config(separations=args.separations, epsilons=args.epsilons,
                       seeds=parse_ints("--seeds", args.seeds), runs=args.runs, n=args.n, shape=args.shape,
                       mode=args.mode, alpha=args.alpha, skip_margin=args.skip_margin,
                       band_width=args.band_width, sensitivity=args.sensitivity, split=args.split,
                       bound=args.bound, guard=args.guard, kappa_sep=args.kappa_sep, kappa_gap=args.kappa_gap,
                       dbscan_eps=args.dbscan_eps, dbscan_min_samples=args.dbscan_min_samples,
                       circuit_checks=args.circuit_checks, server=args.server)
    return main(cfg, args.out)


def _do_dcs(args: argparse.Namespace) -> int:
    import sys
    import time

    from dpsense.cloud.errors import UsageError
    from dpsense.cloud.sim.experiments.dcs import markdown, run_dcs
    from dpsense.cloud.sim.experiments.paper1 import Paper1Config
    if not args.epsilon_a > 0 or any(not e > 0 for e in args.epsilon_cs + args.epsilon_cs_aware):
        raise UsageError("--epsilon-a and --epsilon-cs must be > 0")
    try:
        cfg = Paper1Config(separations=args.separations, epsilons=args.epsilons,
                           seeds=parse_ints("--seeds", args.seeds), n=args.n)
    except ValueError as e:
        raise UsageError(str(e)) from None
    t0 = time.perf_counter()
    rows = run_dcs(cfg, args.epsilon_a, args.epsilon_cs,
                   progress=lambda line: print(line, file=sys.stderr, flush=True), aware=args.epsilon_cs_aware)
    print(markdown(rows))
    print("\n%d seeds x %d separations x %d epsilons, n = %d, %.0f s"
          % (len(cfg.seeds), len(cfg.separations), len(cfg.epsilons), cfg.n, time.perf_counter() - t0))
    return 0


def _do_families(args: argparse.Namespace) -> int:
    import sys
    import time

    from dpsense.cloud.errors import UsageError
    from dataclasses import replace

    from dpsense.cloud.sim.experiments.families import TUNING_SEEDS, FamiliesConfig, markdown, run_families
    try:
        cfg = FamiliesConfig(seeds=parse_ints("--seeds", args.seeds), epsilons=args.epsilons, n=args.n)
        if args.families:
            cfg = replace(cfg, families=tuple(f.strip() for f in args.families.split(",")))
    except ValueError as e:
        raise UsageError(str(e)) from None
    t0 = time.perf_counter()
    rows = run_families(cfg, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(markdown(cfg, rows))
    tuned = sorted(set(cfg.seeds) & set(TUNING_SEEDS))
    print("\nseeds %s (%s), epsilons %s, n = %d, %.0f s"
          % (",".join(map(str, cfg.seeds)), "tuning seeds among them: %s" % tuned if tuned else "none of them tuned on",
             ",".join("%g" % e for e in cfg.epsilons), cfg.n, time.perf_counter() - t0))
    return 0


def _do_faults(args: argparse.Namespace) -> int:
    import sys
    import time

    from dpsense.cloud.errors import UsageError
    from dpsense.cloud.sim.experiments.faults import FaultsConfig, markdown, run_faults
    try:
        cfg = FaultsConfig(seeds=parse_ints("--seeds", args.seeds), epsilons=args.epsilons, n=args.n,
                           devices=args.devices)
    except ValueError as e:
        raise UsageError(str(e)) from None
    t0 = time.perf_counter()
    rows = run_faults(cfg, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(markdown(cfg, rows))
    print("\nsimulated sensor fleet: seeds %s, epsilons %s, n = %d, %d devices, %.0f s"
          % (",".join(map(str, cfg.seeds)), ",".join("%g" % e for e in cfg.epsilons), cfg.n, cfg.devices,
             time.perf_counter() - t0))
    return 0
