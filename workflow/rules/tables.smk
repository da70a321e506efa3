# Aggregates: the footprint table (paper size vs the 16 GB V100) and the measured
# small-preset table, plus the footprint figure.


rule footprint_table:
    input:
        analytic=analytic_profiles,
        measured=measured_profiles,
    output:
        csv=report("results/tables/footprint.csv", caption="../report/footprint_table.rst", category="0. Models"),
        md="results/tables/footprint.md",
        measured="results/tables/measured_profiles.csv",
        figure=report("results/figures/footprint.png", caption="../report/footprint.rst", category="0. Models"),
        batch_csv="results/tables/memory_vs_batch.csv",
        batch_figure=report("results/figures/memory_vs_batch.png", caption="../report/memory_vs_batch.rst",
                            category="0. Models"),
    log:
        "logs/footprint_table.log",
    benchmark:
        "logs/benchmarks/footprint_table.tsv",
    params:
        hardware=config["hardware"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/footprint_table.py"


rule paper_claims:
    input:
        speedups="results/tables/speedup_summary.csv",
        runtime="results/tables/measured_vs_predicted.csv",
        scaling="results/tables/scaling.csv",
        large_nlp="results/tables/large_nlp_summary.csv",
        nlp_map="results/tables/nlp_map.csv",
    output:
        csv=report("results/tables/paper_claims.csv", caption="../report/paper_claims.rst",
                   category="5. The paper's claims and ours"),
        md="results/tables/paper_claims.md",
    log:
        "logs/paper_claims.log",
    benchmark:
        "logs/benchmarks/paper_claims.tsv",
    conda:
        "../../environment.yml"
    script:
        "../scripts/paper_claims.py"


rule calibration:
    output:
        csv=report("results/tables/calibration.csv", caption="../report/calibration.rst",
                   category="0. Models"),
        md="results/tables/calibration.md",
    log:
        "logs/calibration.log",
    benchmark:
        "logs/benchmarks/calibration.tsv",
    conda:
        "../../environment.yml"
    script:
        "../scripts/calibration_table.py"
