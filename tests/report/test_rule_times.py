"""The pipeline's time per rule, from Snakemake's benchmark files."""

from karma.report.rule_times import rule_times, summary

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def write(path, seconds, rss="12.5"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{seconds}\t0:00:01\t{rss}\t1\t1\t1\t0\t0\t50\t1\n")


def test_jobs_of_a_rule_are_summed_and_the_slowest_rule_comes_first(tmp_path):
    write(tmp_path / "compare_strategies/v100/resnet50.tsv", 3.0)
    write(tmp_path / "compare_strategies/v100/vgg16.tsv", 5.0, rss="-")
    write(tmp_path / "reach.tsv", 7.5)
    table = rule_times(tmp_path)
    assert list(table.rule) == ["compare_strategies", "reach"]
    first = table.iloc[0]
    assert (first.jobs, first.total_s, first.longest_s, first.max_rss_mb) == (2, 8.0, 5.0, 12.5)
    assert "3 jobs, 16 s of job time in all" in summary(tmp_path)


def test_no_benchmark_says_so(tmp_path):
    assert summary(tmp_path) == "no rule wrote a benchmark"
