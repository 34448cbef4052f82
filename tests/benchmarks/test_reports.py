"""The reports' reading of the roofline bar."""

from benchmarks.common import roofline_summary


def row(workload: str, bound: str, flops: float, ours: float, torch: float | None) -> dict:
    return {"workload": workload, "bound": bound, "flops": flops, "ours_roofline_fraction": ours,
            "torch_roofline_fraction": torch}


def test_roofline_summary_reads_big_compute_bound_tasks_against_peak_and_the_rest_against_bandwidth() -> None:
    rows = [row("a", "compute", 2e8, 0.9, 0.5), row("b", "compute", 3e8, 0.6, 0.7), row("c", "compute", 4e8, 0.8, None),
            row("tiny", "compute", 1e6, 0.1, 0.1), row("gemv", "memory", 4e6, 0.7, 0.2)]
    text = roofline_summary(rows, {"ours": "ours", "torch": "torch"})
    assert "compute-bound tasks of >= 100 MFLOP (3): ours median 80% of peak, lowest 60% (b); " \
           "torch median 60% of peak, lowest 50% (a)" in text
    assert "memory-bound tasks (1): ours median 70% of bandwidth, lowest 70% (gemv)" in text
    assert "tiny" not in text


def test_a_row_run_again_takes_the_place_of_the_old_one() -> None:
    from benchmarks.compare import replace

    rows = [{"workload": "a", "trials": 256, "v": 1}, {"workload": "b", "trials": 256, "v": 1},
            {"workload": "a", "trials": 64, "v": 1}]
    replace(rows, {"workload": "a", "trials": 256, "v": 2})
    replace(rows, {"workload": "c", "trials": 256, "v": 2})
    assert [(r["workload"], r["trials"], r["v"]) for r in rows] == [("a", 256, 2), ("b", 256, 1), ("a", 64, 1),
                                                                    ("c", 256, 2)]


def test_a_transfer_recipe_sets_ranker_arguments_and_lightgbm_settings_over_the_shipped_ones() -> None:
    from types import SimpleNamespace

    import numpy as np

    from benchmarks.cost_model_transfer import fit

    rng = np.random.default_rng(0)
    features = rng.random((200, 4))
    train = SimpleNamespace(features=features, throughputs=features[:, 0] + 0.1 * rng.random(200),
                            groups=np.array([100, 100]))
    model = fit(train, 0, np.arange(4), {"num_boost_round": 3, "max_depth": 1})  # an argument, a setting
    trees = model.booster_.dump_model()["tree_info"]
    assert len(trees) == 3 and all(t["num_leaves"] <= 2 for t in trees)  # shipped: 150 trees of 63 leaves
