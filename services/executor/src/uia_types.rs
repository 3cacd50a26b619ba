//! UI Automation control type ids (`UIA_*ControlTypeId`, 50000..=50040) and their names, shared so the
//! mapping the Windows backend uses is tested on every platform.

const NAMES: [&str; 41] = [
    "Button",
    "Calendar",
    "CheckBox",
    "ComboBox",
    "Edit",
    "Hyperlink",
    "Image",
    "ListItem",
    "List",
    "Menu",
    "MenuBar",
    "MenuItem",
    "ProgressBar",
    "RadioButton",
    "ScrollBar",
    "Slider",
    "Spinner",
    "StatusBar",
    "Tab",
    "TabItem",
    "Text",
    "ToolBar",
    "ToolTip",
    "Tree",
    "TreeItem",
    "Custom",
    "Group",
    "Thumb",
    "DataGrid",
    "DataItem",
    "Document",
    "SplitButton",
    "Window",
    "Pane",
    "Header",
    "HeaderItem",
    "Table",
    "TitleBar",
    "Separator",
    "SemanticZoom",
    "AppBar",
];

/// The name of a UIA control type id ("Custom" for ids outside the known range).
pub fn control_type_name(id: i32) -> &'static str {
    usize::try_from(id - 50_000)
        .ok()
        .and_then(|i| NAMES.get(i))
        .copied()
        .unwrap_or("Custom")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_ids() {
        assert_eq!(control_type_name(50_000), "Button");
        assert_eq!(control_type_name(50_004), "Edit");
        assert_eq!(control_type_name(50_019), "TabItem");
        assert_eq!(control_type_name(50_032), "Window");
        assert_eq!(control_type_name(50_033), "Pane");
        assert_eq!(control_type_name(50_040), "AppBar");
        assert_eq!(control_type_name(12), "Custom");
    }
}
