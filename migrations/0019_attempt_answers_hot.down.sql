-- 0019_attempt_answers_hot: undo (pages filled to the brim again).
ALTER TABLE job_attempts RESET (fillfactor);
