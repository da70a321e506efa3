"""Hardware presets load, cite their sources, and bad files fail in one line naming the field."""

import re

import pytest
import yaml

from karma.core.errors import KarmaError
from karma.core.hardware import FIELDS, HOST_FIELDS, PRESET_DIR, figure_sources, load, preset_names


def test_paper_machine_and_newer_ones_exist():
    assert {"v100-abci", "a100-40gb", "a100-80gb", "h100", "h200", "gh200"} <= set(preset_names())


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_loads_with_si_units(name):
    hw = load(name)
    assert hw.device_memory > 1e9 and hw.flops > 1e12 and hw.h2d_bw > 1e9
    assert hw.kernel_launch < 1e-4


@pytest.mark.parametrize("name", preset_names())
def test_every_figure_is_under_a_comment_citing_its_source(name):
    """Each run of field lines must follow a comment (the figure's source)."""
    lines = (PRESET_DIR / f"{name}.yaml").read_text().splitlines()
    commented = False
    for line in lines:
        if line.startswith("#"):
            commented = True
        elif re.match(r"^\w+:", line):
            key = line.split(":")[0]
            if key in FIELDS:
                assert commented, f"{name}: '{key}' has no source comment above it"
        elif not line.strip():
            commented = False


def test_v100_matches_the_paper_machine():
    hw = load("v100-abci")
    assert hw.device_memory == 16e9 and hw.gpus_per_node == 4
    assert hw.h2d_bw == hw.d2h_bw == 12e9


def write(tmp_path, data):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def base():
    return yaml.safe_load((PRESET_DIR / "v100-abci.yaml").read_text())


@pytest.mark.parametrize("field", list(FIELDS))
def test_missing_field_is_named(tmp_path, field):
    data = base()
    del data[field]
    with pytest.raises(KarmaError, match=f"missing field '{field}'"):
        load(write(tmp_path, data))


@pytest.mark.parametrize("value", [-1, 0, "fast", None, True, float("nan")])
def test_bad_value_is_named(tmp_path, value):
    data = base()
    data["h2d_gbs"] = value
    with pytest.raises(KarmaError, match="'h2d_gbs' must be a positive number"):
        load(write(tmp_path, data))


@pytest.mark.parametrize("change, match", [
    ({"gpus_per_node": 2.5}, "'gpus_per_node' must be an integer"),
    ({"link_duplex": "triple"}, "'link_duplex' must be 'full' or 'half'"),
    ({"hbm_gbs": 3}, "unknown field 'hbm_gbs'"),
    ({"host_memory_gb": 3}, "unknown field 'host_memory_gb'; valid: .*host_memory_gbs"),
])
def test_other_malformed_fields(tmp_path, change, match):
    with pytest.raises(KarmaError, match=match):
        load(write(tmp_path, {**base(), **change}))


@pytest.mark.parametrize("text, match", [("a: [1, 2", "not valid YAML"), ("- 1\n- 2\n", "expected a mapping")])
def test_unparseable_files(tmp_path, text, match):
    with pytest.raises(KarmaError, match=match) as err:
        load(write(tmp_path, text))
    assert "\n" not in str(err.value)


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(KarmaError, match="valid: .*v100-abci"):
        load("v200")


def test_user_file_round_trips(tmp_path):
    data = {**base(), "name": "my-gpu", "device_memory_gb": 24}
    hw = load(write(tmp_path, data))
    assert hw.name == "my-gpu" and hw.device_memory == 24e9


@pytest.mark.parametrize("name", preset_names())
def test_every_figure_of_every_preset_names_its_source(name):
    rows = figure_sources(name)
    given = set(HOST_FIELDS) & set(yaml.safe_load((PRESET_DIR / f"{name}.yaml").read_text()))
    assert sorted(r["field"] for r in rows) == sorted([*FIELDS, *given])
    assert all(r["source"] for r in rows), [r["field"] for r in rows if not r["source"]]
