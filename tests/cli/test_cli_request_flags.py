"""The request flags of `run`, `up` and `simulate` (--count, --gpu, --type, --market/--buy,
--regions, --model): GPU names through the catalog, and every flag checked like the file."""

from __future__ import annotations

import json

import pytest

from gpufill.cli import main
from tests.support import EXAMPLES

PLENTY = str(EXAMPLES / "markets/plenty.json")
NOWHERE = ["--region", "us-east-1", "--endpoint-url", "http://127.0.0.1:9"]


def test_gpu_names_map_to_the_types_that_carry_them(capsys):
    assert main(["simulate", "--gpu", "4xL4", "--count", "1", "--buy", "on-demand", "--market", PLENTY, "--json"]) == 1
    cause = json.loads(capsys.readouterr().out)["execution"]["cause"]
    assert "g6.12xlarge, g6.24xlarge" in json.dumps(cause)  # the 4-GPU L4 types, smallest first
    assert main(["simulate", "--gpu", "L4", "--count", "2", "--market", PLENTY, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["execution"]["output"]
    assert result["launched"] == 2 and {i["instance_type"] for i in result["instances"]} == {"g6.xlarge"}


@pytest.mark.parametrize("gpu, message", [
    ("Z9", "--gpu 'Z9': 'Z9' is not a GPU gpufill knows; known: T4, A10G, L4, L40S, V100, A100, H100, H200"),
    ("A100:2", "--gpu 'A100:2': no type carries 2 A100; they come 8 per instance"),
    ("L4:x", "--gpu 'L4:x': give a GPU name, optionally with GPUs per instance (L4, L4:4, 4xL4)"),
])
def test_an_unknown_gpu_lists_the_known_ones(capsys, gpu, message):
    assert main(["up", "--gpu", gpu, "--json", *NOWHERE]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["message"].startswith(message)


def test_a_request_naming_a_gpu_as_its_type_is_told_the_types_that_carry_it(tmp_path, capsys):
    request = tmp_path / "l4.json"
    request.write_text(json.dumps({"instance_types": ["L4"], "count": 2}))
    assert main(["run", str(request), "--yes", "--json", *NOWHERE]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["fields"] == [{"field": "instance_types", "problem": (
        "'L4' is a GPU, not an instance type; the types that carry it (GPUs each): g6.xlarge (1), g6.2xlarge (1), "
        "g6.4xlarge (1), gr6.4xlarge (1), g6.8xlarge (1), gr6.8xlarge (1), g6.16xlarge (1), g6.12xlarge (4), "
        "g6.24xlarge (4), g6.48xlarge (8)")}]


def test_flags_are_checked_like_the_file(capsys):
    assert main(["run", "--type", "g6.xlarge,g5.xlarge", "--count", "0", "--model", "not a repo", "--yes", *NOWHERE]) == 2
    err = capsys.readouterr().err
    assert "count: must be greater than or equal to 1" in err and "model_id:" in err and "Nothing was started." in err
    assert main(["up", *NOWHERE]) == 2
    assert "give a REQUEST file, or request flags such as --gpu L4 --count 2" in capsys.readouterr().err
    assert main(["up", "--gpu", "L4", "--type", "g6.xlarge", *NOWHERE]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
