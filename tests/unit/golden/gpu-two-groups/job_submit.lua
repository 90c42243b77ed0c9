-- job_submit.lua for SlurmCluster research/gpu, rendered by Warden (JobSubmitPlugins=lua).
-- Users that only read Slurm submit and change no jobs: warden-reader (uid 64999) is the
-- exporter's user (its token is in Secret gpu-exporter-token), and a token for it must not
-- become a way to run programs on the workers.
local READ_ONLY = { [64999] = "warden-reader" }
-- The bridge's user warden-bridge (uid 64998, token in Secret gpu-bridge-token) submits
-- placeholders for Kubernetes pods: external jobs (the EXTERNAL_JOB flag), which carry no script and can
-- launch nothing. Anything else from it (a batch script, an allocation steps could run in) is refused.
local BRIDGE_UID = 64998
local EXTERNAL_JOB = 16777216
-- The bridge's partition (spec.bridge.partition; "" without the bridge) holds its placeholders and nobody
-- else's jobs: no time limit of its own, no account, and a tenant's pods share its nodes. root and SlurmUser
-- (uid 64030, the operator's) may.
local BRIDGE_PARTITION = ""
local SLURM_UID = 64030

-- Lua 5.1 (what Slurm links here) has no bit operators: bitflags is a whole number below 2^53.
local function external(job_desc)
    return math.floor((job_desc.bitflags or 0) / EXTERNAL_JOB) % 2 == 1
end

local function names_bridge_partition(partition)
    if BRIDGE_PARTITION == "" or partition == nil then
        return false
    end
    for p in string.gmatch(partition, "[^,]+") do
        if p == BRIDGE_PARTITION then
            return true
        end
    end
    return false
end

local function outside_bridge(uid, partition)
    if uid == BRIDGE_UID or uid == 0 or uid == SLURM_UID or not names_bridge_partition(partition) then
        return false
    end
    slurm.log_info("job_submit/lua: refused a job of uid %d in the bridge's partition %s", uid, BRIDGE_PARTITION)
    slurm.log_user("partition %s takes the bridge's placeholders for Kubernetes pods only", BRIDGE_PARTITION)
    return true
end

local function refuse(uid, what)
    slurm.log_info("job_submit/lua: refused %s by %s (uid %d): it only reads Slurm", what, READ_ONLY[uid], uid)
    slurm.log_user("%s only reads Slurm: it may not %s", READ_ONLY[uid], what)
    return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    if READ_ONLY[submit_uid] then
        return refuse(submit_uid, "submit jobs")
    end
    if submit_uid == BRIDGE_UID and (job_desc.script ~= nil or not external(job_desc)) then
        slurm.log_info("job_submit/lua: refused a job by warden-bridge (uid %d) that is not an external job", submit_uid)
        slurm.log_user("warden-bridge submits external jobs only (placeholders for Kubernetes pods)")
        return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
    end
    if outside_bridge(submit_uid, job_desc.partition) then
        return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
    end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    if READ_ONLY[modify_uid] then
        return refuse(modify_uid, "change jobs")
    end
    if outside_bridge(modify_uid, job_desc.partition) then
        return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
    end
    return slurm.SUCCESS
end

return slurm.SUCCESS
