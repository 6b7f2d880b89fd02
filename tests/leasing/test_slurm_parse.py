"""Reading Slurm 22.05's output: shapes copied from the lab (tests/fixtures/slurm/)."""

from pathlib import Path

import pytest

from leasing.backends import slurm_parse as sp

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_nodes_with_gres_usage_and_a_drain_reason():
    gpu01, gpu02 = sp.parse_nodes(fixture("show_node_drain.txt"))
    assert gpu01.name == "gpu01" and gpu01.cpus == 8 and gpu01.memory_mb == 64000
    assert gpu01.gres == [sp.Gres("gpu", "a100", 4), sp.Gres("gpu", "h800", 2)]
    assert gpu01.gres_used == [sp.Gres("gpu", "a100", 2, (0, 1)), sp.Gres("gpu", "h800", 1, (4,))]
    assert gpu01.availability == "up"
    assert gpu01.cards() == [
        (0, "a100"),
        (1, "a100"),
        (2, "a100"),
        (3, "a100"),
        (4, "h800"),
        (5, "h800"),
    ]
    assert gpu02.state == "MIXED+DRAIN" and gpu02.availability == "drained"
    assert gpu02.reason.startswith("bad fan [root@")


def test_one_line_output_reads_the_same_and_spaces_in_values_survive():
    nodes = sp.parse_nodes(fixture("show_node_oneline.txt"))
    assert [n.name for n in nodes] == ["gpu01", "gpu02"]
    assert [n.availability for n in nodes] == ["up", "up"]
    record = sp.parse_records(fixture("show_node_oneline.txt").splitlines()[0])[0]
    assert record["OS"].startswith("Linux ") and "#1 SMP" in record["OS"]


@pytest.mark.parametrize(
    ("state", "availability"),
    [
        ("IDLE", "up"),
        ("MIXED", "up"),
        ("ALLOCATED", "up"),
        ("IDLE+DRAIN", "drained"),
        ("DRAINED", "drained"),
        ("DOWN*", "down"),
        ("IDLE*", "down"),
        ("DOWN+DRAIN", "down"),
        ("INVAL", "down"),
        ("IDLE+MAINT+RESERVED", "drained"),
    ],
)
def test_node_states(state, availability):
    assert sp.SlurmNode("n", state).availability == availability


def test_job_detail_gives_user_limit_and_indices_per_node():
    (job,) = sp.parse_jobs(fixture("show_job_running.txt"))
    assert (job.job_id, job.name, job.user, job.state) == (8, "cardpool-41", "alice", "RUNNING")
    assert job.time_limit_minutes == 30 and job.run_time_minutes == 1
    assert job.gres == {"gpu01": [sp.Gres("gpu", "a100", 2, (0, 1))]}
    assert job.live


def test_job_detail_over_two_nodes():
    text = fixture("show_job_running.txt").replace(
        "     Nodes=gpu01 CPU_IDs=0 Mem=0 GRES=gpu:a100:2(IDX:0-1)",
        "     Nodes=gpu01 CPU_IDs=0 Mem=0 GRES=gpu:a100:2(IDX:0-1)\n"
        "     Nodes=gpu02 CPU_IDs=0 Mem=0 GRES=gpu:a100:2(IDX:0,1)",
    )
    (job,) = sp.parse_jobs(text)
    assert job.gres["gpu02"] == [sp.Gres("gpu", "a100", 2, (0, 1))]


def test_squeue_lines():
    jobs = sp.parse_squeue(fixture("squeue.txt") + "\nsqueue: error: garbage\n")
    assert [(j.job_id, j.name, j.user, j.nodes) for j in jobs] == [
        (8, "cardpool-41", "alice", "gpu01"),
        (9, "cardpool-42", "bob", "gpu01"),
        (12, "cardpool-46", "nobody", "gpu02"),
    ]
    assert jobs[0].time_limit_minutes == 45 and jobs[0].tres_per_node == "gres:gpu:a100:2"
    assert sp.parse_gres(jobs[1].tres_per_node) == [sp.Gres("gpu", "h800", 1)]


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("30:00", 30),
        ("00:30:00", 30),
        ("1-00:00:00", 1440),
        ("2-03:04:00", 2 * 1440 + 3 * 60 + 4),
        ("00:00:06", 1),
        ("UNLIMITED", None),
        ("", None),
    ],
)
def test_time_limits(text, minutes):
    assert sp.parse_time_limit(text) == minutes


def test_time_limit_round_trip():
    for minutes in (1, 59, 60, 1441, 43200):
        assert sp.parse_time_limit(sp.format_time_limit(minutes)) == minutes


def test_gres_edge_cases():
    assert sp.parse_gres("(null)") == []
    assert sp.parse_gres("gpu:a100:0(IDX:N/A),gpu:h800:0(IDX:N/A)") == [
        sp.Gres("gpu", "a100", 0),
        sp.Gres("gpu", "h800", 0),
    ]
    assert sp.parse_gres("gpu:a100:3(IDX:0,2-3)") == [sp.Gres("gpu", "a100", 3, (0, 2, 3))]
    assert sp.parse_gres("gpu:4") == [sp.Gres("gpu", "", 4)]


def test_hostlists():
    assert sp.expand_hostlist("gpu[01-03,07],login1") == [
        "gpu01",
        "gpu02",
        "gpu03",
        "gpu07",
        "login1",
    ]
    assert sp.expand_hostlist("gpu01") == ["gpu01"]
    assert sp.expand_hostlist("") == []


def test_job_names_and_salloc_output():
    assert sp.lease_id_from_job_name("cardpool-41") == 41
    assert sp.lease_id_from_job_name("cardpool-x") is None
    assert sp.lease_id_from_job_name("wrap") is None
    assert sp.parse_salloc("salloc: Granted job allocation 8\n") == 8
    busy = (
        "salloc: Pending job allocation 10\nsalloc: job 10 queued and waiting for resources\n"
        "salloc: error: Unable to allocate resources: Connection timed out\n"
    )
    assert sp.parse_salloc(busy) is None
    assert sp.classify_salloc_failure(busy) is None  # busy: worth retrying
    assert "cannot ever hold" in sp.classify_salloc_failure(
        "salloc: error: Job submit/allocate failed: Requested node configuration is not available"
    )
    assert "Unix user" in sp.classify_salloc_failure(
        "runuser: user zed does not exist or the user entry does not contain all the required fields"
    )
