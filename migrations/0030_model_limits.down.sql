-- 0030_model_limits: undo.
DROP TABLE IF EXISTS tenancy_models_imported;
DROP TABLE IF EXISTS tenancy_models;
