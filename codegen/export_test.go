package codegen

// Header is the first line of every file the extension generates.
const Header = header

// CloudEventsPrefix is the CloudEvents key prefix the AsyncAPI document
// names for a broker URL scheme.
var CloudEventsPrefix = cloudEventsPrefix

// CloudEventsKey is the header the AsyncAPI document names for a
// CloudEvents attribute with a key prefix ("" for none).
var CloudEventsKey = cloudEventsKey
