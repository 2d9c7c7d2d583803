"""A ``job_submit.lua`` for the SLURM lab, written from a site's table (``ddp_tutorial/sites/<site>.toml``).

SLURM's lua job-submit plugin (Debian: ``job_submit_lua.so``; ``JobSubmitPlugins=lua`` and the script
beside ``slurm.conf``) calls ``slurm_job_submit(job_desc, part_list, submit_uid)`` for every ``sbatch``,
``srun`` or ``salloc`` allocation, ``sbatch --test-only`` included. The script written here refuses what the
site's guide forbids, per partition of the table:

* a job on a GPU-only partition that asks for no GPU (``gpu_only``);
* fewer GPUs than ``min_gpus`` or fewer cores than ``min_cores`` (per job);
* fewer cores than ``cores_per_gpu`` × the GPUs asked;
* a time limit beyond ``max_time`` (SLURM's own ``MaxTime`` only leaves such a job pending, ``PartitionTimeLimit``).

Each refusal is one line per broken rule in the site's words: the guide's Turkish sentence, its source
(``path:line`` at the commit the table read) and the English meaning, then one line saying what the job
asked for. It reaches the user through ``slurm.log_user`` (sbatch prints it after ``sbatch: error:``).

SLURM 22.05's job_desc: ``partition`` (nil: the default partition; a comma list: each is checked),
``min_nodes``, ``num_tasks``, ``ntasks_per_node``, ``cpus_per_task``, ``min_cpus`` (unset:
``slurm.NO_VAL``/``NO_VAL16``), ``time_limit`` in minutes, GPUs in ``tres_per_node`` / ``tres_per_job`` /
``tres_per_task`` / ``tres_per_socket`` (``gres:gpu:2``, ``gres:gpu:v100:2``; ``gres/gpu:2`` from 23.02);
``--cpus-per-gpu`` in ``cpus_per_tres``. Seen in the lab: ``-N 2 -c 10`` gives ``min_cpus`` 20 and
``num_tasks`` unset, ``--gres=gpu:1`` is ``tres_per_node``, ``--gpus=2`` is ``tres_per_job``.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from ddp_tutorial import sites


def minutes(limit: str) -> int:
    """SLURM's time format (``04:00:00``, ``3-00:00:00``, ``30``, ``2:30``) → whole minutes."""
    days, _, rest = limit.rpartition("-") if "-" in limit else ("0", "", limit)
    parts = [int(p) for p in rest.split(":")]
    if len(parts) == 1:        # minutes, or hours after a day count
        h, m, s = (parts[0], 0, 0) if days != "0" else (0, parts[0], 0)
    elif len(parts) == 2:      # minutes:seconds, or hours:minutes after a day count
        h, m, s = (parts[0], parts[1], 0) if days != "0" else (0, parts[0], parts[1])
    else:
        h, m, s = parts[:3]
    return int(days) * 1440 + h * 60 + m + (1 if s else 0)


def duration_tr(limit: str) -> str:
    """``3-00:00:00`` → ``3 gün``, ``04:00:00`` → ``4 saat`` (the guide's way), else the limit itself."""
    total = minutes(limit)
    if total % 1440 == 0:
        return f"{total // 1440} gün"
    if total % 60 == 0:
        return f"{total // 60} saat"
    return f"{total} dakika"


def _lua(text: str) -> str:
    """A Lua string literal (UTF-8 passes through; Lua 5.1 strings are bytes)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _cite(site: sites.Site, part: sites.Partition, fld: str) -> str:
    spec = part.sources.get(fld)  # "path:line", or a tuple of them
    spec = spec if isinstance(spec, str) or spec is None else ", ".join(spec)
    return f" ({site.name.upper()} kılavuzu {spec})" if spec else ""


def words(site: sites.Site, part: sites.Partition) -> Dict[str, str]:
    """The refusal line for each rule ``part`` has: ``min``, ``gpu_only``, ``cores_per_gpu``, ``max_time``."""
    p = part.name
    out: Dict[str, str] = {}
    if part.min_cores or part.min_gpus:
        tr = f"{p}: En az {part.min_cores or 1} çekirdek"
        en = f"at least {part.min_cores or 1} {'core' if (part.min_cores or 1) == 1 else 'cores'}"
        if part.min_gpus:
            tr += f" ve {part.min_gpus} GPU"
            en += f" and {part.min_gpus} GPU{'s' if part.min_gpus > 1 else ''}"
        out["min"] = f"{tr}{_cite(site, part, 'min_cores')} — {en} per job"
    if part.gpu_only:
        out["gpu_only"] = (f"{p}: GPU kuyruklarına gönderilen işlerin GPU talep eden işler olması zorunludur"
                           f"{_cite(site, part, 'gpu_only')} — a GPU partition runs only jobs that ask for GPUs")
    if part.cores_per_gpu:
        n = part.cores_per_gpu
        out["cores_per_gpu"] = (f"{p} kümesi için {n}*[GPU_SAYISI] çekirdek{_cite(site, part, 'cores_per_gpu')}"
                                f" — at least {n} cores for each GPU asked")
    if part.max_time:
        out["max_time"] = (f"{p}: maksimum {duration_tr(part.max_time)}{_cite(site, part, 'max_time')}"
                           f" — at most {part.max_time}")
    return out


def default_partition(site: sites.Site, lab_partitions: Optional[List[str]] = None) -> str:
    """The partition a job without ``-p`` lands in: ``debug`` where the site has one."""
    names = lab_partitions or list(site.partitions)
    return "debug" if "debug" in names else names[0]


def lua(site: sites.Site, partitions: Optional[List[str]] = None, default: Optional[str] = None) -> str:
    """The text of ``job_submit.lua`` enforcing ``site``'s rules for ``partitions`` (default: all)."""
    names = partitions or list(site.partitions)
    default = default or default_partition(site, names)
    guide = site.raw.get("guide", {})
    rules = []
    for name in names:
        part = site.partitions[name]
        fields = []
        for key in ("min_cores", "min_gpus", "cores_per_gpu"):
            value = getattr(part, key)
            if value:
                fields.append(f"{key} = {int(value)}")
        if part.gpu_only:
            fields.append("gpu_only = true")
        if part.max_time:
            fields.append(f"max_minutes = {minutes(part.max_time)}")
        said = ", ".join(f"{k} = {_lua(v)}" for k, v in words(site, part).items())
        fields.append(f"words = {{ {said} }}")
        rules.append(f"  [{_lua(name)}] = {{\n    " + ",\n    ".join(fields) + ",\n  },")
    rule_table = "\n".join(rules)
    return f"""\
-- Written by tests/helpers/job_submit.py from ddp_tutorial/sites/{site.name}.toml
-- ({guide.get('repository', '?')} at {guide.get('commit', '?')[:7]}): the site's written rules, enforced at submit.

local RULES = {{
{rule_table}
}}
local DEFAULT_PARTITION = {_lua(default)}

-- a job_desc number, or nil when the user did not set it
local function given(value)
  if value == nil or value == slurm.NO_VAL or value == slurm.NO_VAL16 or value == slurm.NO_VAL64
     or value == 65534 or value == 4294967294 then
    return nil
  end
  return value
end

-- GPUs in a TRES string: "gres:gpu:2", "gres:gpu:v100:2", "gres/gpu:2", "gres/gpu=2"; "gres:gpu" is 1
local function gpus_in(tres)
  local total = 0
  if tres == nil then return 0 end
  for item in string.gmatch(tres, "[^,]+") do
    if string.find(item, "gpu", 1, true) then
      total = total + (tonumber(string.match(item, "[:=](%d+)$")) or 1)
    end
  end
  return total
end

local function hms(minutes)
  if minutes == nil then return nil end
  local days = math.floor(minutes / 1440)
  local rest = minutes - days * 1440
  local text = string.format("%02d:%02d:00", math.floor(rest / 60), rest % 60)
  if days > 0 then text = days .. "-" .. text end
  return text
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local nodes = given(job_desc.min_nodes) or 1
  local per_task = given(job_desc.cpus_per_task) or 1
  local tasks = given(job_desc.num_tasks)
  if tasks == nil then
    local per_node = given(job_desc.ntasks_per_node)
    tasks = per_node and per_node * nodes or nodes   -- SLURM's default: one task per node
  end
  local gpus = gpus_in(job_desc.tres_per_job)
    + gpus_in(job_desc.tres_per_node) * nodes
    + gpus_in(job_desc.tres_per_task) * tasks
    + gpus_in(job_desc.tres_per_socket) * nodes
  -- --cpus-per-gpu N arrives as cpus_per_tres "gres:gpu:N"
  local cores = math.max(tasks * per_task, given(job_desc.min_cpus) or 0, gpus_in(job_desc.cpus_per_tres) * gpus)
  local minutes = given(job_desc.time_limit)

  local broken = {{}}
  local wanted = job_desc.partition or DEFAULT_PARTITION
  for name in string.gmatch(wanted, "[^,]+") do
    local rule = RULES[name]
    if rule ~= nil then
      if rule.gpu_only and gpus == 0 then
        table.insert(broken, rule.words.gpu_only)
      elseif (rule.min_gpus and gpus < rule.min_gpus) or (rule.min_cores and cores < rule.min_cores) then
        table.insert(broken, rule.words.min)
      end
      if rule.cores_per_gpu and gpus > 0 and cores < rule.cores_per_gpu * gpus then
        table.insert(broken, rule.words.cores_per_gpu)
      end
      if rule.max_minutes and minutes and minutes > rule.max_minutes then
        table.insert(broken, rule.words.max_time)
      end
    end
  end
  if #broken == 0 then
    return slurm.SUCCESS
  end
  local only_time = true
  for _, line in ipairs(broken) do
    only_time = only_time and string.find(line, "maksimum", 1, true) ~= nil
  end
  table.insert(broken, string.format(
    "Bu iş: %d çekirdek, %d GPU, süre %s (kuyruk %s) — this job asks for %d %s, %d %s, time %s (partition %s)",
    cores, gpus, hms(minutes) or "verilmedi", wanted, cores, cores == 1 and "core" or "cores",
    gpus, gpus == 1 and "GPU" or "GPUs", hms(minutes) or "not given", wanted))
  slurm.log_user(table.concat(broken, "\\n"))
  -- a time limit alone: SLURM's own words follow ("Requested time limit is invalid …")
  return only_time and slurm.ESLURM_INVALID_TIME_LIMIT or slurm.ERROR
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end

return slurm.SUCCESS
"""


if __name__ == "__main__":  # python tests/helpers/job_submit.py [site]: print the script
    import sys

    print(lua(sites.load(sys.argv[1] if len(sys.argv) > 1 else "truba")), end="")
