-- Screenshots arrive already compressed (PNG, JPEG): keep artifact blobs out of line without TOAST's pglz
-- compression, which spent CPU on every PutArtifact for no space saved.
ALTER TABLE artifact_blobs ALTER COLUMN data SET STORAGE EXTERNAL;
