-- job_submit.lua for SlurmCluster hpc/cpu, rendered by Warden (JobSubmitPlugins=lua).
-- Users that only read Slurm submit and change no jobs: warden-reader (uid 64999) is the
-- exporter's user (its token is in Secret cpu-exporter-token), and a token for it must not
-- become a way to run programs on the workers.
local READ_ONLY = { [64999] = "warden-reader" }

local function refuse(uid, what)
    slurm.log_info("job_submit/lua: refused %s by %s (uid %d): it only reads Slurm", what, READ_ONLY[uid], uid)
    slurm.log_user("%s only reads Slurm: it may not %s", READ_ONLY[uid], what)
    return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    if READ_ONLY[submit_uid] then
        return refuse(submit_uid, "submit jobs")
    end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    if READ_ONLY[modify_uid] then
        return refuse(modify_uid, "change jobs")
    end
    return slurm.SUCCESS
end

return slurm.SUCCESS
