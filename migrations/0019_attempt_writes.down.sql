-- 0019_attempt_writes: undo (pages filled to the brim again; the foreign
-- key back, once the rows of jobs deleted otherwise than by retention are
-- gone).
DELETE FROM job_attempts a WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.tenant = a.tenant AND j.id = a.job_id);
ALTER TABLE job_attempts ADD CONSTRAINT job_attempts_tenant_job_id_fkey
    FOREIGN KEY (tenant, job_id) REFERENCES jobs (tenant, id) ON DELETE CASCADE;
ALTER TABLE job_attempts RESET (fillfactor);
