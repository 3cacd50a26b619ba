//! AT-SPI roles mapped onto UI Automation control type names, so agents see one vocabulary on every
//! platform (the reference's control filter is written in UIA names).

use atspi::Role;

/// The UIA control type name for an AT-SPI role; `editable` distinguishes entries from labels.
pub fn control_type(role: Role, editable: bool) -> &'static str {
    use Role::*;
    match role {
        Button | ToggleButton | PushButtonMenu => "Button",
        CheckBox => "CheckBox",
        RadioButton => "RadioButton",
        CheckMenuItem | RadioMenuItem | MenuItem | TearoffMenuItem => "MenuItem",
        Entry | PasswordText | Editbar => "Edit",
        Text | Paragraph if editable => "Edit",
        Text | Paragraph | Label | Static | Caption | Heading => "Text",
        ComboBox => "ComboBox",
        List | ListBox => "List",
        ListItem | TableCell => "ListItem",
        Menu | PopupMenu => "Menu",
        MenuBar => "MenuBar",
        PageTab => "TabItem",
        PageTabList => "Tab",
        ScrollBar => "ScrollBar",
        Slider => "Slider",
        SpinButton => "Spinner",
        Table | TreeTable => "Table",
        Tree => "Tree",
        TreeItem => "TreeItem",
        Link => "Hyperlink",
        Frame | Window | Dialog | Alert | FileChooser | ColorChooser | FontChooser => "Window",
        ToolBar => "ToolBar",
        StatusBar => "StatusBar",
        ProgressBar | LevelBar => "ProgressBar",
        Image | Icon | Animation => "Image",
        DocumentFrame | DocumentText | DocumentWeb | DocumentEmail | DocumentSpreadsheet
        | DocumentPresentation | Terminal => "Document",
        Separator => "Separator",
        TitleBar => "TitleBar",
        // Column and row headers are clickable (they sort); the header bar itself is "Header".
        TableColumnHeader | ColumnHeader | TableRowHeader | RowHeader => "HeaderItem",
        Header => "Header",
        Grouping | Form => "Group",
        Calendar => "Calendar",
        _ => "Pane",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_common_roles() {
        assert_eq!(control_type(Role::Button, false), "Button");
        assert_eq!(control_type(Role::ToggleButton, false), "Button");
        assert_eq!(control_type(Role::Text, true), "Edit");
        assert_eq!(control_type(Role::Text, false), "Text");
        assert_eq!(control_type(Role::PageTab, false), "TabItem");
        assert_eq!(control_type(Role::Panel, false), "Pane");
        assert_eq!(control_type(Role::Frame, false), "Window");
    }
}
