# Aggregates: the footprint table (paper size vs the 16 GB V100) and the measured
# small-preset table, plus the footprint figure.


rule footprint_table:
    input:
        analytic=analytic_profiles,
        measured=measured_profiles,
    output:
        csv="results/tables/footprint.csv",
        md="results/tables/footprint.md",
        measured="results/tables/measured_profiles.csv",
        figure="results/figures/footprint.png",
    log:
        "logs/footprint_table.log",
    params:
        hardware=config["hardware"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/footprint_table.py"
