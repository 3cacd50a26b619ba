-- A new artifact kind: the whole desktop after a task's last step, captured when the task ended and kept
-- under its last step (services/agent/src/runner/task.rs, `--after-picture-timeout-ms`).
ALTER TABLE artifacts DROP CONSTRAINT artifacts_kind_check;
ALTER TABLE artifacts ADD CONSTRAINT artifacts_kind_check CHECK (kind IN ('clean_screenshot',
    'annotated_screenshot', 'desktop_screenshot', 'selected_control_screenshot', 'ui_tree', 'other',
    'after_screenshot'));
