package mysql

// PackRowBytes is the most bytes of events one page row holds of a unit.
const PackRowBytes = packRowBytes
