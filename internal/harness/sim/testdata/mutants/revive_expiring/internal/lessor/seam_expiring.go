package lessor

// Mutant: a session whose Expire was proposed is still renewed, so a
// holder is told "renewed" for a session whose end may commit.
const refuseExpiring = false
